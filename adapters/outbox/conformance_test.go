package outbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/observe"
	"github.com/txmsg/txmsg/txmsg/txmsgtest"
)

func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	testbed.RunsOnStockBroker(t)
	txmsgtest.RunTransactor(t, func(t *testing.T) txmsgtest.TransactorEnv {
		testbed.RequireBroker(t)
		db := testbed.DB(t)
		ob, err := outbox.New(db, outbox.Config{})
		require.NoError(t, err)
		require.NoError(t, ob.Migrate(context.Background()))
		topic := testbed.Topic(t)
		pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{
			Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "confpub"),
			Topics: []string{topic},
		})
		require.NoError(t, err)
		require.NoError(t, pub.Start(context.Background()))
		relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = relay.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			<-done
			_ = pub.Close(context.Background())
		})
		return txmsgtest.TransactorEnv{Transactor: ob, DB: db, Topic: topic, Observer: observe.Topic(t, topic)}
	})
}

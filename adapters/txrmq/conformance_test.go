package txrmq_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/observe"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/txmsgtest"
)

func TestTransactionalConformance(t *testing.T) {
	t.Parallel()
	testbed.RunsOnStockBroker(t)
	txmsgtest.RunTransactor(t, func(t *testing.T) txmsgtest.TransactorEnv {
		testbed.RequireBroker(t)
		db := testbed.DB(t)
		chk, err := checker.New(db, checker.Config{})
		require.NoError(t, err)
		require.NoError(t, chk.Migrate(context.Background()))
		topic := testbed.Topic(t)
		tr, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{
			Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "conf"),
			Topics: []string{topic},
		})
		require.NoError(t, err)
		require.NoError(t, tr.Start(context.Background()))
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return txmsgtest.TransactorEnv{Transactor: tr, DB: db, Topic: topic, Observer: observe.Topic(t, topic), BrokerMessageID: true}
	})
}

func TestPublisherConformance(t *testing.T) {
	t.Parallel()
	testbed.RunsOnStockBroker(t)
	txmsgtest.RunPublisher(t, func(t *testing.T) txmsgtest.PublisherEnv {
		testbed.RequireBroker(t)
		topic := testbed.Topic(t)
		start := func(t testing.TB, cfg txrmq.PublisherConfig) *txrmq.Publisher {
			// MaxBodySize above the test broker's maxMessageSize (4 MiB), so
			// that the broker, not the Publisher, refuses a larger body.
			cfg.MaxBodySize = 5 << 20
			cfg.Topics = []string{topic}
			p, err := txrmq.NewPublisher(cfg)
			require.NoError(t, err)
			require.NoError(t, p.Start(context.Background()))
			t.Cleanup(func() { _ = p.Close(context.Background()) })
			return p
		}
		return txmsgtest.PublisherEnv{
			Publisher: start(t, txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "confpub")}),
			Topic:     topic,
			Observer:  observe.Topic(t, topic),
			DB:        testbed.DB(t),
			Unavailable: func(t testing.TB) txmsg.Publisher {
				// A name server nobody listens on; its warning goes to the test's log.
				return start(t, txrmq.PublisherConfig{
					Conn:  txrmq.Conn{NameServers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.NewTextHandler(testbed.LogWriter(t), nil))},
					Group: testbed.Name(t, "confaway"), SendTimeout: time.Second, Retries: 1,
				})
			},
			Rejected: func(topic string) *txmsg.Message {
				body := make([]byte, 4<<20+1024)
				_, _ = rand.Read(body) // incompressible: the client compresses large bodies
				return &txmsg.Message{Topic: topic, Body: body}
			},
		}
	})
}

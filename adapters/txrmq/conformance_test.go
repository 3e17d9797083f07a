package txrmq_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/conformance"
	"github.com/txmsg/txmsg/internal/testbed"
)

func TestTransactionalConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, conformance.Features{BrokerMessageID: true}, func(t *testing.T) conformance.Env {
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
		return conformance.Env{Transactor: tr, DB: db, Topic: topic}
	})
}

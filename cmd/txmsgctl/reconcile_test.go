package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// reconcile -since finds the committed events the brokers do not have, in
// both tables, and publishes them again; -dry-run only reports them.
func TestReconcilePublishesTheMissingEvents(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t)
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	vars := map[string]string{"TXMSG_DSN": dsn, "TXMSG_NAMESRV": testbed.NameServer()}
	r := ctl(t, vars, "migrate")
	require.Equal(t, exitOK, r.code, r)

	chk, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(t, err)
	lostTx := &txmsg.Message{ID: txmsg.NewID(), Topic: topic, Body: []byte(`{"n":1}`)}
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, lostTx) }))
	ob, err := outbox.New(db, outbox.Config{})
	require.NoError(t, err)
	lostOb := &txmsg.Message{ID: txmsg.NewID(), Topic: topic, Body: []byte(`{"n":2}`)}
	_, err = ob.Transact(ctx, lostOb, func(context.Context, *gorm.DB) error { return nil })
	require.NoError(t, err)
	require.NoError(t, db.Table(ob.Table()).Where("msg_id = ?", []byte(lostOb.ID)).
		Updates(map[string]any{"status": outbox.StatusSent, "sent_at": gorm.Expr("UTC_TIMESTAMP(6)"), "updated_at": gorm.Expr("UTC_TIMESTAMP(6)")}).Error)

	r = ctl(t, vars, "reconcile", "-since", "10m", "-dry-run")
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "missing "+lostTx.ID)
	require.Contains(t, r.stdout, "missing "+lostOb.ID)
	require.Contains(t, r.stdout, "republished 0")
	obs.NoDeliveries(t, time.Second)

	r = ctl(t, vars, "reconcile", "-since", "10m", "-mode", "transactional", "-producer-group", testbed.Name(t, "ctl"))
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "barrier  txmsg_barrier: checked 1, missing 1, republished 1")
	require.NotContains(t, r.stdout, "outbox")
	obs.DeliveredOnce(t, lostTx.ID)
	obs.NeverDelivered(t, lostOb.ID, time.Second)

	// A window that ends before the events checks none.
	r = ctl(t, vars, "reconcile", "-since", "2h", "-until", "1h", "-producer-group", testbed.Name(t, "ctl"))
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "checked 0, missing 0")

	r = ctl(t, vars, "reconcile", "-since", "1m", "-until", "2m")
	require.Equal(t, exitUsage, r.code, r)
	r = ctl(t, map[string]string{"TXMSG_DSN": dsn}, "reconcile")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "-namesrv")
}

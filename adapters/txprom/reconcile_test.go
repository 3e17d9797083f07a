package txprom_test

import (
	"context"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	txprom "github.com/txmsg/txmsg/adapters/txprom"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// A reconciler's pass over a sent outbox row the broker never received
// counts one pass, one event checked, missing and republished.
func TestReconcilerMetrics(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	reg := prom.NewRegistry()
	m := txprom.New(txprom.Config{})
	reg.MustRegister(m)
	m.AddReconciler("rec")
	require.Zero(t, value(t, reg, "txmsg_reconcile_events_total", "reconciler", "rec", "result", "missing"))

	ob, err := outbox.New(db, outbox.Config{})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))
	lost := &txmsg.Message{ID: txmsg.NewID(), Topic: topic, Body: []byte(`{"n":1}`)}
	_, err = ob.Transact(ctx, lost, func(context.Context, *gorm.DB) error { return nil })
	require.NoError(t, err)
	require.NoError(t, db.Table(ob.Table()).Where("msg_id = ?", []byte(lost.ID)).
		Updates(map[string]any{"status": outbox.StatusSent, "sent_at": gorm.Expr("UTC_TIMESTAMP(6)"), "updated_at": gorm.Expr("UTC_TIMESTAMP(6)")}).Error)

	conn := txrmq.Conn{NameServers: []string{testbed.NameServer()}}
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: conn, Group: testbed.Name(t, "pub")})
	require.NoError(t, err)
	require.NoError(t, pub.Start(ctx))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	rec, err := txrmq.NewReconciler(ob, pub, txrmq.ReconcilerConfig{Conn: conn, Name: "rec", Hooks: txmsg.Hooks{m}})
	require.NoError(t, err)
	now, err := ob.Now(ctx)
	require.NoError(t, err)
	res, err := rec.Reconcile(ctx, now.Add(-time.Minute), now.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{lost.ID}, res.Missing)

	require.Equal(t, 1.0, value(t, reg, "txmsg_reconcile_passes_total", "reconciler", "rec", "result", "ok"))
	require.Zero(t, value(t, reg, "txmsg_reconcile_passes_total", "reconciler", "rec", "result", "error"))
	for _, r := range []string{"checked", "missing", "republished"} {
		require.Equal(t, 1.0, value(t, reg, "txmsg_reconcile_events_total", "reconciler", "rec", "result", r), r)
	}
}

package stack

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func TestReconcilerConfigErrors(t *testing.T) {
	t.Parallel()
	db := offlineDB(t)
	base := Config{RocketMQ: txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}, Group: "orders", Reconcile: true}
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"conn set":   {Config{RocketMQ: base.RocketMQ, Group: "orders", Reconcile: true, Reconciler: txrmq.ReconcilerConfig{Conn: txrmq.Conn{Namespace: "x"}}}, "Reconciler.Conn and Hooks"},
		"bad window": {Config{RocketMQ: base.RocketMQ, Group: "orders", Reconcile: true, Reconciler: txrmq.ReconcilerConfig{Window: -time.Second}}, "Window"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Transactional(db, TransactionalConfig{Config: c.cfg})
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
			_, err = Outbox(db, OutboxConfig{Config: c.cfg})
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
		})
	}
	require.True(t, TransactionalConfig{Config: base}.WithDefaults().Checker.KeepMessages, "Reconcile keeps the messages in the barrier")
	require.False(t, TransactionalConfig{Config: Config{Group: "orders"}}.WithDefaults().Checker.KeepMessages)
	s, err := Transactional(db, TransactionalConfig{Config: Config{RocketMQ: base.RocketMQ, Group: "orders", Parts: PartBackground}})
	require.NoError(t, err)
	require.Nil(t, s.Reconciler(), "off by default")
	s.discard()
	s, err = Outbox(db, OutboxConfig{Config: base})
	require.NoError(t, err)
	require.NotNil(t, s.Reconciler())
	s.discard()
}

// A transactional stack with Reconcile: an event committed whose message
// the broker lost is published again by Reconcile and handled once by a
// consumer; the event sent the ordinary way is not published again.
func TestStackReconcilesALostEvent(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := t.Context()
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	require.NoError(t, db.AutoMigrate(&order{}))
	s, err := Transactional(db, TransactionalConfig{Config: Config{
		RocketMQ:  txrmq.Conn{NameServers: []string{testbed.NameServer()}},
		Group:     testbed.Name(t, "pg"),
		Topics:    []string{topic},
		Reconcile: true,
	}})
	require.NoError(t, err)
	require.NotNil(t, s.Reconciler())
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	var mu sync.Mutex
	handled := map[string]int{}
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	route := txmsg.Handle(txmsg.Topic[event]{Name: topic}, func(_ context.Context, _ *gorm.DB, d txmsg.Delivery[event]) error {
		mu.Lock()
		defer mu.Unlock()
		handled[d.Message.ID]++
		return nil
	})
	c, err := txrmq.NewConsumer(inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "cg")})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	count := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return handled[id]
	}

	sent := txmsg.NewID()
	_, err = s.Transact(ctx, &txmsg.Message{ID: sent, Topic: topic, Body: []byte(`{"n":1}`)}, insertOrder(&sent))
	require.NoError(t, err)
	// The tail a failover lost: the local transaction committed, the
	// broker no longer has the message.
	lost := &txmsg.Message{ID: txmsg.NewID(), Topic: topic, Body: []byte(`{"n":2}`)}
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return s.Checker().BeginMessage(ctx, tx, lost) }))
	require.Eventually(t, func() bool { return count(sent) == 1 }, time.Minute, 50*time.Millisecond)

	now, err := s.Checker().Now(ctx)
	require.NoError(t, err)
	var res txrmq.ReconcileResult
	require.Eventually(t, func() bool {
		res, err = s.Reconciler().Reconcile(ctx, now.Add(-time.Minute), now.Add(time.Second))
		require.NoError(t, err)
		return len(res.Missing) == 1
	}, 20*time.Second, 200*time.Millisecond)
	require.Equal(t, []string{lost.ID}, res.Missing)
	require.Equal(t, 1, res.Republished)
	require.Eventually(t, func() bool { return count(lost.ID) == 1 }, time.Minute, 50*time.Millisecond)

	// Run again until the republished copy is indexed: nothing is
	// missing, and each event was handled once.
	require.Eventually(t, func() bool {
		res, err = s.Reconciler().Reconcile(ctx, now.Add(-time.Minute), now.Add(time.Second))
		require.NoError(t, err)
		return len(res.Missing) == 0
	}, 20*time.Second, 200*time.Millisecond)
	time.Sleep(time.Second)
	require.Equal(t, 1, count(sent))
	require.Equal(t, 1, count(lost.ID))
}

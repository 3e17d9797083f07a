package outbox

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// timedPublisher is a memPublisher that also records when each message
// was published.
type timedPublisher struct {
	*memPublisher
	mu sync.Mutex
	at map[string]time.Time
}

func newTimedPublisher() *timedPublisher {
	return &timedPublisher{memPublisher: newMemPublisher(), at: map[string]time.Time{}}
}

func (p *timedPublisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	err := p.memPublisher.Publish(ctx, msgs...)
	now := time.Now()
	p.mu.Lock()
	for _, m := range msgs {
		if _, ok := p.at[m.ID]; !ok {
			p.at[m.ID] = now
		}
	}
	p.mu.Unlock()
	return err
}

func (p *timedPublisher) when(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.at[id]
	return t, ok
}

// TestDelayInvalidWritesNothing: a zero, negative, past or too distant
// delay fails with ErrInvalidMessage before the local transaction runs,
// through Transact and EnqueueTx alike.
func TestDelayInvalidWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p, err := txmsg.NewProducer(e.ob, txmsg.Topic[string]{Name: e.topic})
	require.NoError(t, err)
	ran := false
	local := func(context.Context, *gorm.DB) error { ran = true; return nil }
	for name, opt := range map[string]txmsg.SendOption{
		"zero":          txmsg.WithDelay(0),
		"negative":      txmsg.WithDelay(-time.Second),
		"too far":       txmsg.WithDelay(txmsg.MaxDelay + time.Second),
		"past":          txmsg.WithDeliverAt(time.Now().Add(-time.Second)),
		"zero time":     txmsg.WithDeliverAt(time.Time{}),
		"time too far":  txmsg.WithDeliverAt(time.Now().Add(txmsg.MaxDelay + time.Minute)),
		"both, via msg": func(m *txmsg.Message) { m.Delay, m.DeliverAt = time.Minute, time.Now().Add(time.Hour) },
	} {
		_, err := p.Send(context.Background(), "x", local, opt)
		require.ErrorIs(t, err, txmsg.ErrInvalidMessage, name)
		m, err := p.Message("x", opt)
		if err != nil {
			// An option with an invalid value fails as Message builds.
			require.ErrorIs(t, err, txmsg.ErrInvalidMessage, name)
			continue
		}
		err = e.db.Transaction(func(tx *gorm.DB) error { return e.ob.EnqueueTx(context.Background(), tx, m) })
		require.ErrorIs(t, err, txmsg.ErrInvalidMessage, name)
	}
	require.False(t, ran, "no local transaction ran")
	require.Zero(t, e.count(e.ob.Table()))
}

// TestDelayedRowPublishedWhenDue: a delayed row is not published before
// its due time and is published within a bound after it, although the
// relay's poll interval is far longer: the relay wakes for the next due
// row. The published message carries the due time.
func TestDelayedRowPublishedWhenDue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newTimedPublisher()
	start(t, e.relay(pub, RelayConfig{PollInterval: time.Minute}))
	p, err := txmsg.NewProducer(e.ob, txmsg.Topic[string]{Name: e.topic})
	require.NoError(t, err)

	const delay = 1500 * time.Millisecond
	sent := time.Now()
	late, err := p.Send(context.Background(), "late", createOrder("late"), txmsg.WithDelay(delay))
	require.NoError(t, err)
	now, err := p.Send(context.Background(), "now", createOrder("now"))
	require.NoError(t, err)

	require.Eventually(t, func() bool { return pub.times(now.ID) == 1 }, waitFor, tick, "the undelayed event goes at once")
	rows := e.rows("msg_id = ?", late.ID)
	require.Len(t, rows, 1)
	require.NotNil(t, rows[0].DeliverAt, "deliver_at holds the due time")
	require.Equal(t, rows[0].DeliverAt.UTC(), rows[0].NextAttemptAt.UTC())
	require.Nil(t, e.rows("msg_id = ?", now.ID)[0].DeliverAt)
	require.Zero(t, pub.times(late.ID), "not yet due")

	require.Eventually(t, func() bool { return pub.times(late.ID) == 1 }, 10*time.Second, tick)
	at, _ := pub.when(late.ID)
	require.GreaterOrEqual(t, at.Sub(sent), delay-50*time.Millisecond, "published at its due time, not before (database and test share a host clock)")
	require.Less(t, at.Sub(sent), delay+time.Second, "published within a second of its due time, long before the poll")
	var got *txmsg.Message
	for _, m := range pub.published() {
		if m.ID == late.ID {
			got = m
		}
	}
	require.False(t, got.DeliverAt.IsZero())
	require.WithinDuration(t, *rows[0].DeliverAt, got.DeliverAt, time.Millisecond)
}

// TestDelayedDeliverAt: WithDeliverAt stores the given time as the due
// time (microseconds, rounded up).
func TestDelayedDeliverAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	due := time.Now().Add(time.Hour).Round(0)
	m := e.msg("at")
	m.DeliverAt = due
	r, err := e.ob.Transact(context.Background(), m, createOrder("at"))
	require.NoError(t, err)
	row := e.rows("msg_id = ?", r.ID)[0]
	require.NotNil(t, row.DeliverAt)
	require.False(t, row.DeliverAt.Before(due.Truncate(time.Microsecond)))
	require.WithinDuration(t, due, *row.DeliverAt, time.Microsecond)
	require.EqualValues(t, 1, e.stats().Pending)
}

// TestDelayedClaimSkipsFutureRows: thousands of rows not yet due do not
// slow the claim of due ones: the claim reads a range of a due index
// that ends at the first row not due, as EXPLAIN shows, and a relay
// publishes the due rows promptly.
func TestDelayedClaimSkipsFutureRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Buckets: 4})
	const future, due = 5000, 20
	e.enqueue(future, func(i int) *txmsg.Message {
		m := e.msg(fmt.Sprintf("future-%d", i))
		m.Delay = time.Hour
		return m
	})
	e.enqueue(due, func(i int) *txmsg.Message { return e.msg(fmt.Sprintf("due-%d", i)) })
	require.NoError(t, e.db.Exec("ANALYZE TABLE "+e.ob.Table()).Error)

	r := e.relay(newMemPublisher(), RelayConfig{})
	var plan []map[string]any
	require.NoError(t, e.db.Transaction(func(tx *gorm.DB) error {
		q := r.dueIn(tx.Session(&gorm.Session{DryRun: true}), []int{0, 1, 2, 3}, 100).Find(&[]int64{})
		sql := tx.Dialector.Explain(q.Statement.SQL.String(), q.Statement.Vars...)
		return tx.Raw("EXPLAIN " + sql).Scan(&plan).Error
	}))
	require.Len(t, plan, 1)
	t.Logf("EXPLAIN: %v", plan[0])
	// Either due index serves: (status, bucket, next_attempt_at, id) or
	// (status, next_attempt_at, id); both bound the range by the due time.
	require.Contains(t, []string{"idx_outbox_bucket_due", "idx_outbox_due"}, fmt.Sprint(plan[0]["key"]), "the claim reads by a due index")
	require.Equal(t, "range", fmt.Sprint(plan[0]["type"]))
	rowsEst := fmt.Sprint(plan[0]["rows"])
	var est int
	_, _ = fmt.Sscan(rowsEst, &est)
	require.Less(t, est, future/2, "the range covers the due rows, not the future ones")

	pub := newMemPublisher()
	startAt := time.Now()
	start(t, e.relay(pub, RelayConfig{}))
	require.Eventually(t, func() bool { return pub.distinct() == due }, waitFor, tick)
	t.Logf("%d due rows among %d future ones published in %v", due, future, time.Since(startAt))
	require.Less(t, time.Since(startAt), 5*time.Second)
	require.Never(t, func() bool { return pub.distinct() > due }, 300*time.Millisecond, tick)
	require.EqualValues(t, future, e.stats().Pending)
}

// TestDelayedOrderedKeyHoldsBack: with Ordered, a delayed event holds its
// key's later events back until it is published, so the key keeps commit
// order; other keys and unkeyed events go at once, also past many
// unkeyed rows not yet due in the same bucket.
func TestDelayedOrderedKeyHoldsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Buckets: 1})
	e.enqueue(3*defaultTestBatch, func(i int) *txmsg.Message {
		m := e.msg(fmt.Sprintf("future-%d", i))
		m.Delay = time.Hour
		return m
	})
	pub := newTimedPublisher()
	cfg := orderedConfig("ordered-delay")
	cfg.PollInterval = time.Minute
	start(t, e.relay(pub, cfg))

	send := func(key, body string, delay time.Duration) string {
		m := &txmsg.Message{Topic: e.topic, ShardingKey: key, Body: []byte(body), Delay: delay}
		r, err := e.ob.Transact(context.Background(), m, func(context.Context, *gorm.DB) error { return nil })
		require.NoError(t, err)
		return r.ID
	}
	const delay = time.Second
	first := send("k", "k:0", delay)
	second := send("k", "k:1", 0)
	other := send("other", "other:0", 0)
	unkeyed := send("", "unkeyed:0", 0)

	require.Eventually(t, func() bool { return pub.times(other) == 1 && pub.times(unkeyed) == 1 }, waitFor, tick)
	require.Zero(t, pub.times(second), "held back by the key's delayed event")
	require.Eventually(t, func() bool { return pub.times(second) == 1 }, 10*time.Second, tick)
	a, _ := pub.when(first)
	b, _ := pub.when(second)
	require.False(t, b.Before(a), "the key's order holds")
	var keyed []*txmsg.Message
	for _, m := range pub.published() {
		if m.ShardingKey != "" {
			keyed = append(keyed, m)
		}
	}
	require.Equal(t, []int{0, 1}, perKey(t, keyed)["k"])
}

// defaultTestBatch is RelayConfig's BatchSize in orderedConfig.
const defaultTestBatch = 50

// TestBrokerDelayed: a delayed event goes through the real broker no
// earlier than its due time, and the consumer sees the due time.
func TestBrokerDelayed(t *testing.T) {
	t.Parallel()
	e := brokerEnv(t)
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	obs := testbed.Observe(t, e.topic, func(m *primitive.MessageExt) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := arrived[m.GetProperty(txmsg.PropertyID)]; !ok {
			arrived[m.GetProperty(txmsg.PropertyID)] = time.Now()
		}
		return nil
	})
	start(t, e.relay(brokerPublisher(t), RelayConfig{PollInterval: time.Minute}))
	p, err := txmsg.NewProducer(e.ob, txmsg.Topic[string]{Name: e.topic})
	require.NoError(t, err)

	const delay = 2 * time.Second
	sent := time.Now()
	r, err := p.Send(context.Background(), "delayed", createOrder("delayed"), txmsg.WithDelay(delay))
	require.NoError(t, err)
	_, err = p.Send(context.Background(), "rolled back", func(context.Context, *gorm.DB) error { return fmt.Errorf("no") }, txmsg.WithDelay(delay))
	require.Error(t, err)

	obs.NeverDelivered(t, r.ID, delay-time.Since(sent)-200*time.Millisecond)
	obs.DeliveredWithin(t, r.ID, 10*time.Second)
	mu.Lock()
	at := arrived[r.ID]
	mu.Unlock()
	require.GreaterOrEqual(t, at.Sub(sent), delay-50*time.Millisecond)
	require.Less(t, at.Sub(sent), delay+2*time.Second)
	due, ok := txmsg.ParseDeliverAt(obs.First(r.ID).GetProperty(txmsg.PropertyDeliverAt))
	require.True(t, ok)
	require.WithinDuration(t, sent.Add(delay), due, time.Second)
	require.Never(t, func() bool { return obs.Distinct() > 1 }, time.Second, tick, "the rolled-back event never arrives")
}

// TestDelayedRowsDoNotAge: Stats counts delayed rows as pending, but a row
// not due yet does not make the oldest pending row old.
func TestDelayedRowsDoNotAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	m := e.msg("later")
	m.Delay = time.Hour
	_, err := e.ob.Transact(context.Background(), m, createOrder("later"))
	require.NoError(t, err)
	require.NoError(t, e.db.Exec("UPDATE "+e.ob.Table()+" SET created_at = created_at - INTERVAL 1 DAY").Error)
	s := e.stats()
	require.EqualValues(t, 1, s.Pending)
	require.Zero(t, s.OldestPending)
}

// TestDelayOnATableWithoutDeliverAt: on an outbox table of an earlier
// release, undelayed messages go in and out as before, a delayed one is
// refused naming Migrate, and after Migrate it is taken.
func TestDelayOnATableWithoutDeliverAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	require.NoError(t, e.db.Exec("ALTER TABLE "+e.ob.Table()+" DROP COLUMN deliver_at").Error)
	pub := newMemPublisher()
	start(t, e.relay(pub, RelayConfig{}))
	ids := e.send(1, "plain")
	require.Eventually(t, func() bool { return pub.times(ids[0]) == 1 }, waitFor, tick)
	require.Eventually(t, func() bool { return e.stats().Sent == 1 }, waitFor, tick, "Stats reads the table without deliver_at")

	m := e.msg("later")
	m.Delay = time.Minute
	_, err := e.ob.Transact(context.Background(), m, createOrder("later"))
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Migrate")

	require.NoError(t, e.ob.Migrate(context.Background()))
	m = e.msg("later")
	m.Delay = time.Minute
	_, err = e.ob.Transact(context.Background(), m, createOrder("later"))
	require.NoError(t, err)
}

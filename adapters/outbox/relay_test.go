package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func TestRelayPublishesOnNudge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	// An hour between polls: only the nudge of Transact can wake the relay.
	r := e.relay(pub, RelayConfig{PollInterval: time.Hour})
	start(t, r)

	ids := e.send(3, "nudge", withKey("k1"))
	require.Eventually(t, func() bool { return pub.distinct() == 3 }, waitFor, tick)
	got := pub.published()
	for i, m := range got {
		require.Equal(t, ids[i], m.ID)
		require.Equal(t, fmt.Sprintf("nudge-%d", i), string(m.Body))
		require.Equal(t, "k1", m.ShardingKey)
	}
	require.Eventually(t, func() bool { return e.stats().Sent == 3 }, waitFor, tick)
	for _, row := range e.rows("") {
		require.Equal(t, StatusSent, row.Status)
		require.NotNil(t, row.SentAt)
	}

	// EnqueueTx plus Notify wakes it as well.
	e.enqueue(2, func(i int) *txmsg.Message { return e.msg(fmt.Sprintf("enq-%d", i)) })
	require.Eventually(t, func() bool { return pub.distinct() == 5 }, waitFor, tick)
}

func TestRelayPollsForOtherWriters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	other, err := New(e.db, Config{}) // another process's Outbox: no nudge reaches the relay
	require.NoError(t, err)
	pub := newMemPublisher()
	start(t, e.relay(pub, RelayConfig{PollInterval: 50 * time.Millisecond}))
	_, err = other.Transact(context.Background(), e.msg("x"), createOrder("x"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pub.distinct() == 1 }, waitFor, tick)
}

// A claim skips due rows that another transaction holds (a bucket's
// previous owner finishing a batch, or another relay's claim reading past
// the end of its own bucket's range). The relay looks for such rows after
// a claim and claims again within moments, instead of at the next nudge,
// poll or lease round. Here the test holds one row itself; with an hour
// between polls and lease rounds 100 s apart, only that second look
// publishes it in time.
func TestRelayClaimsARowHeldDuringItsClaimAgainSoon(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ids := e.send(10, "held")
	held := e.db.Begin()
	t.Cleanup(func() { held.Rollback() })
	var locked []int64
	require.NoError(t, held.Raw("SELECT id FROM txmsg_outbox WHERE msg_id = ? FOR UPDATE", ids[3]).Scan(&locked).Error)
	require.Len(t, locked, 1)

	pub := newMemPublisher()
	start(t, e.relay(pub, RelayConfig{PollInterval: time.Hour, LeaseTTL: 300 * time.Second}))
	require.Eventually(t, func() bool { return pub.distinct() == 9 }, waitFor, tick)
	time.Sleep(300 * time.Millisecond) // the relay looks again meanwhile, and finds the row still held
	require.Zero(t, pub.times(ids[3]))
	require.NoError(t, held.Rollback().Error)
	require.Eventually(t, func() bool { return pub.times(ids[3]) == 1 }, waitFor, tick,
		"the row held during the claim waited for the next poll or lease round")
	require.Equal(t, 10, pub.distinct())
}

func TestRelayRunTwiceFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	r := e.relay(newMemPublisher(), RelayConfig{})
	rr := start(t, r)
	require.Eventually(t, func() bool { return r.running.Load() }, waitFor, tick)
	require.Error(t, r.Run(context.Background()))
	require.NoError(t, rr.stop(t))
	require.False(t, r.running.Load())
}

// TestRelayBrokerOutage: the publisher fails for a while (the broker is
// down); rows back off and, once it recovers, all arrive.
func TestRelayBrokerOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	var down atomic.Bool
	down.Store(true)
	pub.setFail(func(*txmsg.Message) error {
		if down.Load() {
			return errors.New("broker unavailable")
		}
		return nil
	})
	r := e.relay(pub, RelayConfig{MinBackoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond, BatchSize: 20, MaxAttempts: 2})
	start(t, r)
	ids := e.send(50, "outage")

	require.Eventually(t, func() bool { return e.stats().Waiting == 50 }, waitFor, tick, "every row fails and waits")
	// The relay records the outage after its cycle, a moment after the rows.
	require.Eventually(t, func() bool { return errors.Is(r.Health(context.Background()), txmsg.ErrUnavailable) }, waitFor, tick)
	// Backing off: at some moment a row waits for a later attempt.
	require.Eventually(t, func() bool {
		return len(e.rows("next_attempt_at > ?", time.Now().UTC())) > 0
	}, waitFor, tick)
	time.Sleep(time.Second) // many more failed cycles than MaxAttempts
	for _, row := range e.rows("") {
		require.Equal(t, StatusPending, row.Status)
		require.Zero(t, row.Attempts, "a broker failure counts no attempt")
		require.Contains(t, row.LastError, "broker unavailable")
	}
	require.Zero(t, pub.distinct())

	down.Store(false)
	require.Eventually(t, func() bool { return e.stats().Sent == 50 }, waitFor, tick)
	for _, id := range ids {
		require.Equal(t, 1, pub.times(id), id)
	}
	for _, row := range e.rows("") {
		require.Empty(t, row.LastError)
	}
	require.Zero(t, e.stats().Waiting)
	require.Eventually(t, func() bool { return r.Health(context.Background()) == nil }, waitFor, tick)
}

// TestRelayPartialBatchFailure: a BatchError fails only its failed rows.
func TestRelayPartialBatchFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	var failing sync.Map
	pub.setFail(func(m *txmsg.Message) error {
		if _, ok := failing.Load(string(m.Body)); ok {
			return errors.New("queue full")
		}
		return nil
	})
	failing.Store("p-3", true)
	failing.Store("p-7", true)
	r := e.relay(pub, RelayConfig{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	e.send(10, "p")
	start(t, r)
	require.Eventually(t, func() bool { return e.stats().Sent == 8 }, waitFor, tick)
	failed := e.rows("status = ?", StatusPending)
	require.Len(t, failed, 2)
	for _, row := range failed {
		require.Equal(t, 1, row.Attempts)
		require.Contains(t, row.LastError, "queue full")
		require.True(t, row.NextAttemptAt.After(time.Now().Add(20*time.Minute)), "backs off about MinBackoff")
	}
}

// TestRelayPoisonIsParked: a message the publisher always rejects is parked
// after MaxAttempts, shows in Stats, and can be requeued.
func TestRelayPoisonIsParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	var reject atomic.Bool
	reject.Store(true)
	pub.setFail(func(m *txmsg.Message) error {
		if string(m.Body) == "poison-1" && reject.Load() {
			return fmt.Errorf("%w: bad property", txmsg.ErrRejected)
		}
		return nil
	})
	start(t, e.relay(pub, RelayConfig{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}))
	ids := e.send(3, "poison")

	require.Eventually(t, func() bool { s := e.stats(); return s.Parked == 1 && s.Sent == 2 }, waitFor, tick)
	dead, err := e.ob.List(context.Background(), ListFilter{Status: StatusParked})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, ids[1], dead[0].MsgID)
	require.Equal(t, 3, dead[0].Attempts)
	require.Contains(t, dead[0].LastError, "bad property")
	require.Zero(t, pub.times(ids[1]))
	s := e.stats()
	require.Zero(t, s.Pending)
	require.Zero(t, s.OldestPending)

	n, err := e.ob.Requeue(context.Background(), ids[1], ids[0], "no-such-id")
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "only the dead row is requeued")
	row := e.rows("msg_id = ?", ids[1])[0]
	require.True(t, row.Status == StatusPending || row.Status == StatusParked)
	require.Eventually(t, func() bool { return e.stats().Parked == 1 }, waitFor, tick, "still poison: dead again")

	reject.Store(false)
	n, err = e.ob.Requeue(context.Background(), ids[1])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Eventually(t, func() bool { return pub.times(ids[1]) == 1 }, waitFor, tick)
	require.Eventually(t, func() bool { return e.stats().Sent == 3 }, waitFor, tick)
}

func TestOpsStatsAndPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	ids := e.send(6, "ops")
	s := e.stats()
	require.EqualValues(t, 6, s.Pending)
	require.Positive(t, s.OldestPending)

	past := time.Now().UTC().Add(-2 * time.Hour)
	require.NoError(t, e.db.Table(e.ob.Table()).Where("msg_id IN ?", ids[:2]).
		Updates(map[string]any{"status": StatusSent, "updated_at": past}).Error)
	require.NoError(t, e.db.Table(e.ob.Table()).Where("msg_id IN ?", ids[2:3]).
		Updates(map[string]any{"status": StatusSent}).Error)
	require.NoError(t, e.db.Table(e.ob.Table()).Where("msg_id IN ?", ids[3:5]).
		Updates(map[string]any{"status": StatusParked, "updated_at": past}).Error)
	s = e.stats()
	require.Equal(t, Stats{Pending: 1, Sent: 3, Parked: 2, OldestPending: s.OldestPending}, s)

	n, err := e.ob.Purge(ctx, time.Hour, 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "only sent rows older than an hour")
	n, err = e.ob.PurgeParked(ctx, time.Hour, 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	s = e.stats()
	require.Equal(t, Stats{Pending: 1, Sent: 1, OldestPending: s.OldestPending}, s)
	_, err = e.ob.Purge(ctx, -time.Second, 0)
	require.Error(t, err)
	n, err = e.ob.Requeue(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestRelayPurgesAfterRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	start(t, e.relay(pub, RelayConfig{Retention: time.Millisecond, PurgeInterval: 50 * time.Millisecond, PurgeBatch: 2}))
	e.send(5, "ret")
	require.Eventually(t, func() bool { return pub.distinct() == 5 }, waitFor, tick)
	require.Eventually(t, func() bool { return len(e.rows("")) == 0 }, waitFor, tick)
}

// TestRelayCrashAfterPublish: a relay that dies after publishing and
// before marking leaves the rows pending; they are published again.
func TestRelayCrashAfterPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	crash := errors.New("killed")
	r := e.relay(pub, RelayConfig{})
	var once atomic.Bool
	r.afterPublish = func(context.Context, []*txmsg.Message) error {
		if once.CompareAndSwap(false, true) {
			return crash
		}
		return nil
	}
	ids := e.send(5, "crash")
	require.ErrorIs(t, r.Run(context.Background()), crash)
	require.Equal(t, 5, pub.distinct(), "the batch went out")
	require.EqualValues(t, 5, e.stats().Pending, "but was never marked")

	start(t, r)
	require.Eventually(t, func() bool { return e.stats().Sent == 5 }, waitFor, tick)
	for _, id := range ids {
		require.Equal(t, 2, pub.times(id))
	}
}

// blockingPublisher holds each Publish until released.
type blockingPublisher struct {
	*memPublisher
	entered chan struct{}
	release chan struct{}
}

func (p *blockingPublisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	p.entered <- struct{}{}
	<-p.release
	return p.memPublisher.Publish(ctx, msgs...)
}

// TestRelayShutdownFinishesInFlightBatch: cancelling Run while a batch is
// being published lets it finish and marks it, instead of publishing it
// again later.
func TestRelayShutdownFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := &blockingPublisher{memPublisher: newMemPublisher(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	e.send(3, "shut")
	rr := start(t, e.relay(pub, RelayConfig{}))
	<-pub.entered
	rr.cancel()
	require.Never(t, rr.exited, 200*time.Millisecond, tick, "Run waits for the in-flight publish")
	close(pub.release)
	require.NoError(t, rr.stop(t))
	require.EqualValues(t, 3, e.stats().Sent)

	// A relay cancelled before it publishes leaves rows pending.
	e.send(2, "later")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, e.relay(pub, RelayConfig{}).Run(ctx))
	require.EqualValues(t, 2, e.stats().Pending)
}

// panickyPublisher panics on its first call.
type panickyPublisher struct {
	*memPublisher
	panicked atomic.Bool
}

func (p *panickyPublisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	if p.panicked.CompareAndSwap(false, true) {
		panic("publisher bug")
	}
	return p.memPublisher.Publish(ctx, msgs...)
}

func TestRelaySurvivesPublisherPanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := &panickyPublisher{memPublisher: newMemPublisher()}
	e.send(2, "pp")
	start(t, e.relay(pub, RelayConfig{}))
	require.Eventually(t, func() bool { return e.stats().Sent == 2 }, waitFor, tick)
	require.True(t, pub.panicked.Load())
	for _, row := range e.rows("") {
		require.Equal(t, 1, row.Attempts, "the panic counted as a failed attempt")
	}
}

// TestTwoRelaysNoDuplicates: two relays drain 10,000 rows between them;
// SKIP LOCKED keeps them from publishing any row twice.
func TestTwoRelaysNoDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	const n = 10000
	e.enqueue(n, func(i int) *txmsg.Message { return e.msg(fmt.Sprintf("m-%d", i)) })
	pub := newMemPublisher()
	var perRelay [2]atomic.Int64
	for i := range 2 {
		r := e.relay(countingPublisher{pub, &perRelay[i]}, RelayConfig{BatchSize: 200, Name: fmt.Sprintf("relay-%d", i)})
		start(t, r)
	}
	require.Eventually(t, func() bool { return pub.distinct() == n }, 60*time.Second, 50*time.Millisecond)
	require.Empty(t, pub.duplicates())
	require.Eventually(t, func() bool { return e.stats().Sent == n }, waitFor, tick)
	t.Logf("relay 0 published %d, relay 1 published %d", perRelay[0].Load(), perRelay[1].Load())
	require.Positive(t, perRelay[0].Load())
	require.Positive(t, perRelay[1].Load())
}

// countingPublisher counts what one relay publishes.
type countingPublisher struct {
	*memPublisher
	n *atomic.Int64
}

func (p countingPublisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	err := p.memPublisher.Publish(ctx, msgs...)
	if err == nil {
		p.n.Add(int64(len(msgs)))
	}
	return err
}

// TestRelayDatabaseDown: the relay's connection to the database is cut;
// it keeps running, and publishes what was committed meanwhile once the
// database is back.
func TestRelayDatabaseDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	cfg, err := mysql.ParseDSN(e.dsn)
	require.NoError(t, err)
	proxy := testbed.NewProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	cfg.Timeout = 2 * time.Second
	cfg.ReadTimeout = 5 * time.Second
	cfg.WriteTimeout = 5 * time.Second
	relayDB, err := testbed.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := relayDB.DB(); err == nil {
			_ = s.Close()
		}
	})

	pub := newMemPublisher()
	relayOb, err := New(relayDB, Config{Logger: testLogger(t)})
	require.NoError(t, err)
	r, err := NewRelay(relayOb, pub, RelayConfig{PollInterval: 50 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	rr := start(t, r)
	e.send(1, "before")
	require.Eventually(t, func() bool { return pub.distinct() == 1 }, waitFor, tick)

	proxy.Cut()
	e.send(5, "during")
	require.Never(t, func() bool { return pub.distinct() > 1 }, 500*time.Millisecond, tick)
	require.False(t, rr.exited())

	proxy.Restore()
	require.Eventually(t, func() bool { return e.stats().Sent == 6 }, waitFor, tick)
	require.Equal(t, 6, pub.distinct())
	require.False(t, rr.exited())
}

func TestNewRelayValidatesConfig(t *testing.T) {
	t.Parallel()
	db := &gorm.DB{}
	pub := newMemPublisher()
	_, err := NewRelay(nil, pub, RelayConfig{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	ob, err := New(db, Config{Table: "orders_outbox", Buckets: 8})
	require.NoError(t, err)
	_, err = NewRelay(ob, nil, RelayConfig{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	for _, cfg := range []RelayConfig{
		{BatchSize: -1},
		{MinBackoff: time.Minute, MaxBackoff: time.Second},
		{MaxWaitBackoff: -time.Second},
		{MaxWaitBackoff: time.Hour},                                 // above the default MaxBackoff
		{MinBackoff: time.Second, MaxWaitBackoff: time.Millisecond}, // below MinBackoff
		{Name: strings.Repeat("n", 256)},
		{Hooks: txmsg.Hooks{"not a hook"}},
	} {
		_, err := NewRelay(ob, pub, cfg)
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "%+v", cfg)
	}
	r, err := NewRelay(ob, pub, RelayConfig{})
	require.NoError(t, err)
	require.Equal(t, "orders_outbox", r.table)
	require.Equal(t, 8, r.buckets)
	require.NotEmpty(t, r.Name())
	require.Equal(t, DefaultBatchSize, r.cfg.BatchSize)
	require.Equal(t, DefaultMaxAttempts, r.cfg.MaxAttempts)
	require.Equal(t, DefaultRetention, r.cfg.Retention)
	require.Equal(t, DefaultMaxWaitBackoff, r.cfg.MaxWaitBackoff)
	for _, c := range []struct {
		cfg  RelayConfig
		want time.Duration
	}{
		{RelayConfig{MaxBackoff: 2 * time.Second}, 2 * time.Second},
		{RelayConfig{MinBackoff: 10 * time.Second}, 10 * time.Second},
		{RelayConfig{MaxWaitBackoff: time.Minute}, time.Minute},
	} {
		r, err := NewRelay(ob, pub, c.cfg)
		require.NoError(t, err)
		require.Equal(t, c.want, r.cfg.MaxWaitBackoff, "%+v", c.cfg)
	}
	require.Equal(t, 500, DefaultBatchSize)
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Second, expBackoff(time.Second, time.Minute, 1))
	require.Equal(t, 8*time.Second, expBackoff(time.Second, time.Minute, 4))
	require.Equal(t, time.Minute, expBackoff(time.Second, time.Minute, 100))
	for range 100 {
		d := jitter(8 * time.Second)
		require.GreaterOrEqual(t, d, 4*time.Second)
		require.LessOrEqual(t, d, 8*time.Second)
	}
}

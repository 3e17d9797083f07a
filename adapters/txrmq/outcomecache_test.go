package txrmq

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// fakeClock drives an outcome cache's age in tests.
type fakeClock struct{ d atomic.Int64 }

func (c *fakeClock) now() time.Duration      { return time.Duration(c.d.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.d.Add(int64(d)) }

func testCache(size int, age time.Duration) (*outcomeCache, *fakeClock) {
	c := newOutcomeCache(size, age)
	clock := &fakeClock{}
	c.now = clock.now
	return c, clock
}

func requireCached(t *testing.T, c *outcomeCache, id, half string, want txmsg.LocalState) {
	t.Helper()
	got, ok := c.lookup(id, half)
	require.True(t, ok, "%s/%s is not cached", id, half)
	require.Equal(t, want, got, "%s/%s", id, half)
}

func requireNotCached(t *testing.T, c *outcomeCache, id, half string) {
	t.Helper()
	got, ok := c.lookup(id, half)
	require.False(t, ok, "%s/%s is cached as %s", id, half, got)
}

// The cache's bookkeeping, without a broker or a database: what it keeps,
// what it drops, and that a newer outcome of an ID replaces the older.
func TestOutcomeCacheBookkeeping(t *testing.T) {
	t.Parallel()
	require.Nil(t, newOutcomeCache(0, time.Minute))
	require.Nil(t, newOutcomeCache(10, 0))
	var off *outcomeCache
	off.record("a", "h", txmsg.StateCommitted) // a nil cache is off and safe to use
	requireNotCached(t, off, "a", "h")

	c, clock := testCache(3, time.Minute)
	c.record("a", "ha", txmsg.StateCommitted)
	c.record("b", "hb", txmsg.StateRolledBack)
	c.record("u", "hu", txmsg.StateUnknown) // never cached
	c.record("e", "", txmsg.StateCommitted) // no half message key: never cached
	requireCached(t, c, "a", "ha", txmsg.StateCommitted)
	requireCached(t, c, "b", "hb", txmsg.StateRolledBack)
	requireNotCached(t, c, "u", "hu")
	requireNotCached(t, c, "e", "")
	requireNotCached(t, c, "a", "other-half") // another half message of the ID
	requireNotCached(t, c, "a", "")

	// Size: the oldest goes first.
	c.record("c", "hc", txmsg.StateCommitted)
	c.record("d", "hd", txmsg.StateCommitted)
	requireNotCached(t, c, "a", "ha")
	requireCached(t, c, "b", "hb", txmsg.StateRolledBack)
	require.Equal(t, 3, c.len())
	require.EqualValues(t, 1, c.evicted.Load())

	// A newer outcome of an ID replaces the older and is the youngest.
	c.record("b", "hb2", txmsg.StateCommitted)
	requireNotCached(t, c, "b", "hb")
	requireCached(t, c, "b", "hb2", txmsg.StateCommitted)
	c.record("f", "hf", txmsg.StateCommitted)
	c.record("g", "hg", txmsg.StateCommitted)
	requireCached(t, c, "b", "hb2", txmsg.StateCommitted) // its stale slot left, not its entry
	requireNotCached(t, c, "c", "hc")
	requireNotCached(t, c, "d", "hd")

	// An unknown outcome drops what the ID had.
	c.record("g", "hg2", txmsg.StateUnknown)
	requireNotCached(t, c, "g", "hg")
	requireNotCached(t, c, "g", "hg2")

	// Age: an entry answers until maxAge, and leaves at the next insert.
	clock.advance(59 * time.Second)
	c.record("h", "hh", txmsg.StateRolledBack)
	requireCached(t, c, "f", "hf", txmsg.StateCommitted)
	clock.advance(time.Second)
	requireNotCached(t, c, "f", "hf")
	requireCached(t, c, "h", "hh", txmsg.StateRolledBack)
	c.record("i", "hi", txmsg.StateCommitted)
	require.Equal(t, 2, c.len(), "expired entries are evicted on insert")
	requireCached(t, c, "h", "hh", txmsg.StateRolledBack)
	requireCached(t, c, "i", "hi", txmsg.StateCommitted)
}

// The ring grows to its size bound, keeps record order across growth and
// wrap-around, and stays consistent under concurrent use (run with -race).
func TestOutcomeCacheGrowsAndIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	const size = 1000
	c, _ := testCache(size, time.Minute)
	for i := range 3 * size {
		c.record(fmt.Sprint(i), fmt.Sprint("h", i), txmsg.StateCommitted)
		if i%7 == 0 {
			c.record(fmt.Sprint(i/2), fmt.Sprint("r", i/2), txmsg.StateRolledBack) // reuse an ID
		}
	}
	require.Len(t, c.ring, size)
	require.LessOrEqual(t, c.len(), size)
	requireCached(t, c, fmt.Sprint(3*size-1), fmt.Sprint("h", 3*size-1), txmsg.StateCommitted)
	requireNotCached(t, c, "0", "h0")

	var wg sync.WaitGroup
	var wrong atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				id := fmt.Sprint(w, "-", i)
				c.record(id, "h"+id, txmsg.StateRolledBack)
				if got, ok := c.lookup(id, "h"+id); ok && got != txmsg.StateRolledBack {
					wrong.Add(1)
				}
				c.lookup(fmt.Sprint((w+1)%8, "-", i), "x")
			}
		}()
	}
	wg.Wait()
	require.Zero(t, wrong.Load())
	require.LessOrEqual(t, c.len(), size)
}

func TestTransactionalCacheConfig(t *testing.T) {
	t.Parallel()
	window := 30 * time.Minute
	for _, tc := range []struct {
		name      string
		size      int
		age       time.Duration
		window    time.Duration
		wantSize  int
		wantAge   time.Duration
		wantError bool
	}{
		{"defaults", 0, 0, window, DefaultCheckBackCacheSize, DefaultCheckBackCacheAge, false},
		{"short window", 0, 0, time.Minute, DefaultCheckBackCacheSize, time.Minute, false},
		{"set", 10, time.Minute, window, 10, time.Minute, false},
		{"size off", -1, 0, window, 0, 0, false},
		{"age off", 10, -1, window, 0, 0, false},
		{"age past the window", 0, time.Hour, window, 0, 0, true},
	} {
		cfg := TransactionalConfig{CheckBackCacheSize: tc.size, CheckBackCacheAge: tc.age}
		size, age, err := cfg.cache(tc.window)
		if tc.wantError {
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig, tc.name)
			require.ErrorContains(t, err, "CheckBackCacheAge", tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.wantSize, size, tc.name)
		require.Equal(t, tc.wantAge, age, tc.name)
	}
}

// answerLog keeps every answer the CheckBack hooks saw.
type answerLog struct {
	mu   sync.Mutex
	seen []answerSeen
}

type answerSeen struct {
	id    string
	state txmsg.LocalState
	err   error
}

func (r *answerLog) OnCheckBack(_ string, id, _ string, state txmsg.LocalState, err error, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, answerSeen{id, state, err})
}

// answered reports whether the hooks saw id answered state without error.
func (r *answerLog) answered(id string, state txmsg.LocalState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen {
		if s.id == id && s.state == state && s.err == nil {
			return true
		}
	}
	return false
}

// startWith builds and starts a transactional producer of the env's group
// from cfg; before runs before Start. It is closed when t ends.
func (e *txEnv) startWith(t *testing.T, cfg TransactionalConfig, db *gorm.DB, chk *checker.Checker, before func(*Transactional)) *Transactional {
	t.Helper()
	tr, err := NewTransactional(db, chk, cfg)
	require.NoError(t, err)
	if before != nil {
		before(tr)
	}
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}

// checkBackFor is the message of a broker check-back for the half message
// a receipt names, as the client hands it to the listener.
func checkBackFor(topic string, r *txmsg.Receipt) *primitive.MessageExt {
	ext := &primitive.MessageExt{Message: primitive.Message{Topic: topic}, BornTimestamp: time.Now().UnixMilli()}
	ext.WithProperty(txmsg.PropertyID, r.ID)
	ext.WithProperty(primitive.PropertyUniqueClientMessageIdKeyIndex, r.BrokerMessageID)
	ext.TransactionId = r.BrokerMessageID
	return ext
}

var errLocal = errors.New("the local function failed")

func failLocal(context.Context, *gorm.DB) error { return errLocal }

// transact sends one message with id (a new one when empty) and returns
// its receipt, which names the half message.
func transact(t *testing.T, tr *Transactional, topic, id string, local txmsg.LocalTx) (*txmsg.Receipt, error) {
	t.Helper()
	r, err := tr.Transact(context.Background(), &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{}`)}, local)
	require.NotNil(t, r, "no receipt: %v", err)
	require.NotEmpty(t, r.BrokerMessageID)
	return r, err
}

// A committed and a rolled-back transaction of this producer are answered
// from the cache while the checker's database is unreachable; an ID the
// cache does not hold gets UNKNOWN (the database decides). The rollback
// was answered from memory: the barrier has no fencing row for it.
func TestCheckBackCacheAnswersWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	proxy, cutChk := e.cuttableChecker(t)
	rec := &answerLog{}
	cfg := e.config(nil)
	cfg.Hooks = txmsg.Hooks{rec}
	tr := e.startWith(t, cfg, e.db, cutChk, nil)

	committed, err := transact(t, tr, e.topic, "", createOrder("cached"))
	require.NoError(t, err)
	rolledBack, err := transact(t, tr, e.topic, "", failLocal)
	require.ErrorIs(t, err, errLocal)
	require.Equal(t, txmsg.StateRolledBack, rolledBack.State)
	require.Equal(t, 2, tr.CheckBackCacheStats().Entries)

	proxy.Cut()
	ctx := context.Background()
	require.Equal(t, primitive.CommitMessageState, tr.resolve(ctx, checkBackFor(e.topic, committed)))
	require.Equal(t, primitive.RollbackMessageState, tr.resolve(ctx, checkBackFor(e.topic, rolledBack)))
	stranger := &txmsg.Receipt{ID: txmsg.NewID(), BrokerMessageID: "0A0B0C0D0000000000000000000000FF"}
	require.Equal(t, primitive.UnkonwnState, tr.resolve(ctx, checkBackFor(e.topic, stranger)), "the database is reachable")

	require.True(t, rec.answered(committed.ID, txmsg.StateCommitted))
	require.True(t, rec.answered(rolledBack.ID, txmsg.StateRolledBack))
	st := tr.CheckBackCacheStats()
	require.GreaterOrEqual(t, st.Hits, int64(2))
	require.EqualValues(t, 1, st.Misses)

	proxy.Restore()
	require.Equal(t, checker.StateCommitted, e.barrier(t, committed.ID))
	require.Empty(t, e.barrier(t, rolledBack.ID), "the rollback was answered from the database")
}

// When COMMIT's result is lost, nothing is cached: the broker's
// check-back goes to the barrier, which finds no row (the connection died
// before COMMIT reached the server), writes the fencing rolled_back row
// and answers ROLLBACK.
func TestCheckBackCacheSkipsUnknownOutcome(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	proxy, localDB := testbed.ProxiedDB(t, e.dsn)
	rec := &answerLog{}
	cfg := e.config(nil)
	cfg.Hooks = txmsg.Hooks{rec}
	tr := e.startWith(t, cfg, localDB, e.chk, nil)

	r, err := transact(t, tr, e.topic, "", func(ctx context.Context, tx *gorm.DB) error {
		if err := createOrder("lost-commit")(ctx, tx); err != nil {
			return err
		}
		proxy.Cut() // COMMIT will fail on a dead connection
		return nil
	})
	require.ErrorIs(t, err, txmsg.ErrOutcomeUnknown)
	proxy.Restore()
	require.Zero(t, tr.CheckBackCacheStats().Entries)

	require.Eventually(t, func() bool { return rec.answered(r.ID, txmsg.StateRolledBack) }, time.Minute, 50*time.Millisecond,
		"no check-back answered ROLLBACK")
	require.Equal(t, checker.StateRolledBack, e.barrier(t, r.ID), "the barrier did not answer")
	require.Zero(t, tr.CheckBackCacheStats().Hits)
	require.Zero(t, e.orders(t))
	obs.NeverDelivered(t, r.ID, 3*time.Second)
}

// The cache keeps at most CheckBackCacheSize outcomes, the newest, and
// each for CheckBackCacheAge; a check-back for one it dropped goes to the
// database (here unreachable: UNKNOWN).
func TestCheckBackCacheEvictsBySizeAndAge(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	proxy, cutChk := e.cuttableChecker(t)
	cfg := e.config(nil)
	cfg.CheckBackCacheSize, cfg.CheckBackCacheAge = 2, time.Minute
	clock := &fakeClock{}
	tr := e.startWith(t, cfg, e.db, cutChk, func(tr *Transactional) { tr.outcomes.now = clock.now })
	off := e.config(nil)
	off.Group += "-off"
	off.CheckBackCacheSize = -1
	trOff := e.startWith(t, off, e.db, cutChk, nil)
	require.Nil(t, trOff.outcomes)
	ctx := context.Background()

	var rs []*txmsg.Receipt
	for i := range 3 {
		r, err := transact(t, tr, e.topic, "", createOrder(fmt.Sprint("size-", i)))
		require.NoError(t, err)
		rs = append(rs, r)
	}
	proxy.Cut()
	require.Equal(t, primitive.UnkonwnState, tr.resolve(ctx, checkBackFor(e.topic, rs[0])), "the oldest was not evicted")
	require.Equal(t, primitive.CommitMessageState, tr.resolve(ctx, checkBackFor(e.topic, rs[1])))
	require.Equal(t, primitive.CommitMessageState, tr.resolve(ctx, checkBackFor(e.topic, rs[2])))
	require.EqualValues(t, 1, tr.CheckBackCacheStats().Evicted)

	clock.advance(59 * time.Second)
	require.Equal(t, primitive.CommitMessageState, tr.resolve(ctx, checkBackFor(e.topic, rs[2])))
	clock.advance(time.Second)
	require.Equal(t, primitive.UnkonwnState, tr.resolve(ctx, checkBackFor(e.topic, rs[2])), "an entry outlived CheckBackCacheAge")
	late, err := transact(t, tr, e.topic, "", createOrder("late"))
	require.NoError(t, err)
	st := tr.CheckBackCacheStats()
	require.Equal(t, 1, st.Entries, "expired entries stay after an insert")
	require.EqualValues(t, 3, st.Evicted)
	require.Equal(t, primitive.CommitMessageState, tr.resolve(ctx, checkBackFor(e.topic, late)))

	r, err := transact(t, trOff, e.topic, "", createOrder("uncached"))
	require.NoError(t, err)
	require.Equal(t, primitive.UnkonwnState, trOff.resolve(ctx, checkBackFor(e.topic, r)), "a cache that is off answered")
	require.Equal(t, CheckBackCacheStats{}, trOff.CheckBackCacheStats())
}

// A caller that reuses an ID: the later outcome wins for the later half
// message, and the cache never answers for the earlier one. A committed
// transaction whose ID was then reused (and refused with ErrDuplicateID)
// is still answered COMMIT, by the barrier; the refused attempt's own half
// message is answered ROLLBACK.
func TestCheckBackCacheIDReuse(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	proxy, cutChk := e.cuttableChecker(t)
	tr := e.startWith(t, e.config(nil), e.db, cutChk, nil)
	ctx := context.Background()

	// Rolled back, then retried with the same ID and committed.
	retried := txmsg.NewID()
	first, err := transact(t, tr, e.topic, retried, failLocal)
	require.ErrorIs(t, err, errLocal)
	second, err := transact(t, tr, e.topic, retried, createOrder("retried"))
	require.NoError(t, err)
	require.NotEqual(t, first.BrokerMessageID, second.BrokerMessageID)

	// Committed, then reused: the second attempt is refused at its barrier
	// insert and rolls back.
	reused := txmsg.NewID()
	original, err := transact(t, tr, e.topic, reused, createOrder("original"))
	require.NoError(t, err)
	refused, err := transact(t, tr, e.topic, reused, createOrder("reused"))
	require.ErrorIs(t, err, txmsg.ErrDuplicateID)
	require.Equal(t, txmsg.StateRolledBack, refused.State)

	proxy.Cut()
	require.Equal(t, primitive.CommitMessageState, tr.resolve(ctx, checkBackFor(e.topic, second)))
	require.Equal(t, primitive.UnkonwnState, tr.resolve(ctx, checkBackFor(e.topic, first)), "answered ROLLBACK from an outcome the retry replaced")
	require.Equal(t, primitive.RollbackMessageState, tr.resolve(ctx, checkBackFor(e.topic, refused)))
	require.Equal(t, primitive.UnkonwnState, tr.resolve(ctx, checkBackFor(e.topic, original)), "answered from the refused attempt's outcome")

	proxy.Restore()
	require.Equal(t, primitive.CommitMessageState, tr.resolve(ctx, checkBackFor(e.topic, original)))
	require.Equal(t, primitive.CommitMessageState, tr.resolve(ctx, checkBackFor(e.topic, first)))
	require.EqualValues(t, 2, e.orders(t))
}

// lostEnd is a listener whose END_TRANSACTION after the local transaction
// carries no decision, as when the one-way request is lost: the broker
// keeps the half message and checks back.
type lostEnd struct{ listener }

func (l lostEnd) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	l.listener.ExecuteLocalTransaction(m)
	return primitive.UnkonwnState
}

// End to end: the END_TRANSACTION of a committed and of a rolled-back
// transaction is lost, and the checker's database is unreachable. The
// broker's check-backs reach this producer, which answers both from its
// cache: the committed event is delivered once, the rolled-back one never,
// and no fencing row is written. Without the cache both stay undecided
// until the broker gives up.
func TestCheckBackCacheAnswersTheBroker(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	proxy, cutChk := e.cuttableChecker(t)
	rec := &answerLog{}
	cfg := e.config(nil)
	cfg.Hooks = txmsg.Hooks{rec}
	tr := e.startWith(t, cfg, e.db, cutChk, func(tr *Transactional) {
		prod, err := newCheckBackProducer(tr.cfg.producer(), "tx", tr.cb, lostEnd{listener{tr}})
		require.NoError(t, err)
		tr.prod = prod
	})
	proxy.Cut()

	committed, err := transact(t, tr, e.topic, "", createOrder("end-lost"))
	require.NoError(t, err)
	rolledBack, err := transact(t, tr, e.topic, "", failLocal)
	require.ErrorIs(t, err, errLocal)

	obs.DeliveredOnce(t, committed.ID)
	require.True(t, rec.answered(committed.ID, txmsg.StateCommitted))
	require.Eventually(t, func() bool { return rec.answered(rolledBack.ID, txmsg.StateRolledBack) }, time.Minute, 50*time.Millisecond,
		"no check-back for the rolled-back transaction was answered ROLLBACK")
	obs.NeverDelivered(t, rolledBack.ID, 3*time.Second)
	require.GreaterOrEqual(t, tr.CheckBackCacheStats().Hits, int64(2))

	proxy.Restore()
	require.Equal(t, checker.StateCommitted, e.barrier(t, committed.ID))
	require.Empty(t, e.barrier(t, rolledBack.ID))
}

// cacheKeys returns n (txmsg ID, half message key) pairs shaped like the
// real ones: a UUIDv7 and the client's 32 hex digits.
func cacheKeys(n int) (ids, halves []string) {
	ids, halves = make([]string, n), make([]string, n)
	for i := range n {
		ids[i] = txmsg.NewID()
		halves[i] = fmt.Sprintf("7F0000010001187A9ACB%012X", i)
	}
	return ids, halves
}

// BenchmarkOutcomeCache measures the cache alone at its default size: a
// hit, an insert that evicts the oldest, and, once, the heap it takes per
// entry (ID and key strings included, which it shares with the message
// while the message lives).
func BenchmarkOutcomeCache(b *testing.B) {
	const n = DefaultCheckBackCacheSize
	ids, halves := cacheKeys(2 * n)
	b.Run("lookup", func(b *testing.B) {
		c := newOutcomeCache(n, time.Hour)
		for i := range n {
			c.record(ids[i], halves[i], txmsg.StateCommitted)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, ok := c.lookup(ids[i], halves[i]); !ok {
				b.Fatal("miss")
			}
			i = (i + 1) % n
		}
	})
	b.Run("lookup-parallel", func(b *testing.B) {
		c := newOutcomeCache(n, time.Hour)
		for i := range n {
			c.record(ids[i], halves[i], txmsg.StateCommitted)
		}
		var seed atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919)) % n
			for pb.Next() {
				c.lookup(ids[i], halves[i])
				i = (i + 1) % n
			}
		})
	})
	b.Run("record-full", func(b *testing.B) {
		c := newOutcomeCache(n, time.Hour)
		for i := range n {
			c.record(ids[i], halves[i], txmsg.StateCommitted)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			c.record(ids[n+i], halves[n+i], txmsg.StateRolledBack)
			i = (i + 1) % n
		}
	})
	b.Run("bytes-per-entry", func(b *testing.B) {
		for b.Loop() {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ids, halves := cacheKeys(n)
			c := newOutcomeCache(n, time.Hour)
			for i := range n {
				c.record(ids[i], halves[i], txmsg.StateCommitted)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/entry")
			runtime.KeepAlive(c)
		}
	})
}

// A database failover that loses the last committed transactions (a
// replica promoted before it applied them) leaves the outcome cache
// answering COMMIT for a transaction whose rows are gone: its event would
// be delivered for an order that no longer exists. Simulated here by
// deleting the transaction's rows after it committed. With the cache
// turned off (CheckBackCacheSize < 0), every check-back reads the
// barrier, which finds no row, fences it with rolled_back and answers
// ROLLBACK.
func TestCheckBackCacheOffAfterALossyFailover(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	lose := func(id string) {
		require.NoError(t, e.db.Exec("DELETE FROM "+checker.DefaultTable+" WHERE tx_id = ?", id).Error)
	}
	ctx := context.Background()

	cached := e.startWith(t, e.config(nil), e.db, e.chk, nil)
	r, err := transact(t, cached, e.topic, "", createOrder("lost-on-failover-cached"))
	require.NoError(t, err)
	lose(r.ID)
	require.Equal(t, primitive.CommitMessageState, cached.resolve(ctx, checkBackFor(e.topic, r)),
		"the cache answers from memory: this is the condition the setting exists for")

	cfg := e.config(nil)
	cfg.Group = e.group + "_nocache"
	cfg.CheckBackCacheSize = -1
	uncached := e.startWith(t, cfg, e.db, e.chk, nil)
	r, err = transact(t, uncached, e.topic, "", createOrder("lost-on-failover-uncached"))
	require.NoError(t, err)
	require.Zero(t, uncached.CheckBackCacheStats().Entries)
	lose(r.ID)
	require.Equal(t, primitive.RollbackMessageState, uncached.resolve(ctx, checkBackFor(e.topic, r)))
	require.Equal(t, checker.StateRolledBack, e.barrier(t, r.ID))
}

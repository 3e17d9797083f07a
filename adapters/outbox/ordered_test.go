package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
)

func orderedConfig(name string) RelayConfig {
	return RelayConfig{
		Name:        name,
		Ordered:     true,
		BatchSize:   50,
		LeaseTTL:    600 * time.Millisecond,
		MinBackoff:  5 * time.Millisecond,
		MaxBackoff:  20 * time.Millisecond,
		MaxAttempts: -1,
	}
}

// perKey splits published bodies "key:seq" by key, in publish order.
func perKey(t *testing.T, msgs []*txmsg.Message) map[string][]int {
	out := map[string][]int{}
	for _, m := range msgs {
		k, seq, ok := strings.Cut(string(m.Body), ":")
		require.True(t, ok)
		require.Equal(t, k, m.ShardingKey)
		n, err := strconv.Atoi(seq)
		require.NoError(t, err)
		out[k] = append(out[k], n)
	}
	return out
}

// TestOrderedTwoRelays: 1,000 events over 20 keys, written concurrently,
// published by two ordered relays while the publisher fails now and then
// and one relay is replaced halfway: each key's events go out exactly in
// commit order.
func TestOrderedTwoRelays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	const keys, perKeyN = 20, 50
	pub := newMemPublisher()
	pub.setFail(func(*txmsg.Message) error {
		if rand.IntN(20) == 0 {
			return errors.New("flaky broker")
		}
		return nil
	})
	a := start(t, e.relay(pub, orderedConfig("relay-a")))
	start(t, e.relay(pub, orderedConfig("relay-b")))

	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("key-%02d", k)
			for i := range perKeyN {
				e.sendKeyed(key, i)
			}
		}()
	}
	require.Eventually(t, func() bool { return pub.distinct() >= 300 }, waitFor, tick)
	require.NoError(t, a.stop(t)) // its buckets move to the others
	start(t, e.relay(pub, orderedConfig("relay-c")))
	wg.Wait()

	require.Eventually(t, func() bool { return pub.distinct() == keys*perKeyN }, 60*time.Second, 50*time.Millisecond)
	require.Empty(t, pub.duplicates())
	got := perKey(t, pub.published())
	require.Len(t, got, keys)
	want := make([]int, perKeyN)
	for i := range want {
		want[i] = i
	}
	for k, seqs := range got {
		require.Equal(t, want, seqs, "order of %s", k)
	}
	require.Eventually(t, func() bool { return e.stats().Sent == keys*perKeyN }, waitFor, tick)
}

// TestOrderedLeasesBalance: three relays share the buckets fairly; when
// one stops, the others take its buckets.
func TestOrderedLeasesBalance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	owners := func() map[string]int {
		var leases []Lease
		require.NoError(t, e.db.Table(e.ob.Table()+leaseSuffix).Where("expires_at > ?", time.Now().UTC()).Find(&leases).Error)
		out := map[string]int{}
		for _, l := range leases {
			out[l.Owner]++
		}
		return out
	}
	a := start(t, e.relay(pub, orderedConfig("a")))
	require.Eventually(t, func() bool { return owners()["a"] == DefaultBuckets }, waitFor, tick, "a alone takes every bucket")
	start(t, e.relay(pub, orderedConfig("b")))
	start(t, e.relay(pub, orderedConfig("c")))
	var last map[string]int
	require.Eventually(t, func() bool {
		last = owners()
		// Fair share is ceil(16/3) = 6; the last relay may end up with 4.
		return len(last) == 3 && last["a"]+last["b"]+last["c"] == DefaultBuckets &&
			last["a"] <= 6 && last["b"] <= 6 && last["c"] <= 6
	}, waitFor, tick)
	t.Logf("spread over three relays: %v", last)

	require.NoError(t, a.stop(t))
	require.Eventually(t, func() bool {
		last = owners()
		return len(last) == 2 && last["b"] == 8 && last["c"] == 8
	}, waitFor, tick, "a's buckets move over")

	e.send(20, "k", withKey("some-key"))
	require.Eventually(t, func() bool { return pub.distinct() == 20 }, waitFor, tick)
}

// TestOrderedWaitsForUncommittedRow: a row committed after a later row of
// the same key still goes out first, because the relay waits for the
// writer that holds the earlier row.
func TestOrderedWaitsForUncommittedRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	start(t, e.relay(pub, orderedConfig("solo")))
	ctx := context.Background()

	slow := e.db.Begin()
	require.NoError(t, slow.Error)
	require.NoError(t, e.ob.EnqueueTx(ctx, slow, e.msg("k:0", withKey("k"))))
	e.sendKeyed("k", 1) // later id, committed first
	require.Never(t, func() bool { return pub.distinct() > 0 }, 500*time.Millisecond, tick)

	require.NoError(t, slow.Commit().Error)
	require.Eventually(t, func() bool { return pub.distinct() == 2 }, waitFor, tick)
	got := pub.published()
	require.Equal(t, "k:0", string(got[0].Body))
	require.Equal(t, "k:1", string(got[1].Body))
}

// TestOrderedFailingKeyHoldsOnlyItself: a key whose message keeps failing
// holds back its own later messages, not those of other keys in its bucket.
func TestOrderedFailingKeyHoldsOnlyItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Buckets: 1}) // every key in one bucket
	pub := newMemPublisher()
	var failing atomic.Bool
	failing.Store(true)
	pub.setFail(func(m *txmsg.Message) error {
		if failing.Load() && string(m.Body) == "bad:0" {
			return fmt.Errorf("%w: bad:0", txmsg.ErrRejected)
		}
		return nil
	})
	cfg := orderedConfig("solo")
	cfg.BatchSize = 2 // bad's rows fill whole windows: the relay must read past them
	for i := range 5 {
		e.sendKeyed("bad", i)
	}
	for i := range 5 {
		e.sendKeyed("good", i)
	}
	start(t, e.relay(pub, cfg))
	require.Eventually(t, func() bool { return len(perKey(t, pub.published())["good"]) == 5 }, waitFor, tick)
	require.Equal(t, []int{0, 1, 2, 3, 4}, perKey(t, pub.published())["good"])
	require.Eventually(t, func() bool { return len(e.rows("attempts >= 2")) == 1 }, waitFor, tick)
	require.Empty(t, perKey(t, pub.published())["bad"], "bad's later rows wait for bad:0")

	failing.Store(false)
	require.Eventually(t, func() bool { return len(perKey(t, pub.published())["bad"]) == 5 }, waitFor, tick)
	require.Equal(t, []int{0, 1, 2, 3, 4}, perKey(t, pub.published())["bad"])
}

func TestPlanRounds(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	old := now.Add(-time.Second)
	r := &Relay{cfg: RelayConfig{SettleDelay: 100 * time.Millisecond}}
	rows := []*Row{
		{ShardingKey: "a", NextAttemptAt: old, CreatedAt: old},                  // 0
		{ShardingKey: "b", NextAttemptAt: now.Add(time.Minute), CreatedAt: old}, // 1: backing off, holds b
		{ShardingKey: "a", NextAttemptAt: old, CreatedAt: old},                  // 2
		{ShardingKey: "b", NextAttemptAt: old, CreatedAt: old},                  // 3: held by 1
		{ShardingKey: "", NextAttemptAt: old, CreatedAt: now},                   // 4: no key, no settling
		{ShardingKey: "c", NextAttemptAt: old, CreatedAt: now},                  // 5: too young, holds c
		{ShardingKey: "c", NextAttemptAt: old, CreatedAt: old},                  // 6: held by 5
		{ShardingKey: "a", NextAttemptAt: old, CreatedAt: old},                  // 7
		{ShardingKey: "", NextAttemptAt: now.Add(time.Hour), CreatedAt: old},    // 8: not due
		{ShardingKey: "d", NextAttemptAt: old, CreatedAt: old},                  // 9
	}
	var res cycleResult
	rounds := r.planRounds(rows, now, &res)
	require.Equal(t, [][]int{{4, 0, 9}, {2}, {7}}, rounds)
	require.Positive(t, res.retryIn)
	require.LessOrEqual(t, res.retryIn, 100*time.Millisecond, "wakes when row 5 has settled")
}

// sendKeyed commits the event "key:seq" with sharding key key. It may run
// on any goroutine.
func (e *env) sendKeyed(key string, seq int) {
	m := &txmsg.Message{Topic: e.topic, ShardingKey: key, Body: fmt.Appendf(nil, "%s:%d", key, seq)}
	if _, err := e.ob.Transact(context.Background(), m, func(context.Context, *gorm.DB) error { return nil }); err != nil {
		e.t.Errorf("transact %s:%d: %v", key, seq, err)
	}
}

// TestOrderedRelaysNoCopies: eight ordered relays publish keyed traffic
// written at a steady pace while they run, so that their buckets are
// often empty and a claim's read of its bucket would run on into the next
// bucket's first row while that bucket's owner marks it: InnoDB then
// picked the owner as a deadlock victim after it had published, and the
// rows went out again. No row is published twice and every key keeps its
// order.
func TestOrderedRelaysNoCopies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	const relays, keys, rounds = 8, 20, 150
	pub := newMemPublisher()
	var rs []*Relay
	for i := range relays {
		cfg := orderedConfig(fmt.Sprintf("relay-%d", i))
		cfg.LeaseTTL = 2 * time.Second
		r := e.relay(pub, cfg)
		rs = append(rs, r)
		start(t, r)
	}
	deadlocks := func() int64 {
		var row struct {
			VariableName string `gorm:"column:Variable_name"`
			Value        int64  `gorm:"column:Value"`
		}
		require.NoError(t, e.db.Raw("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&row).Error)
		return row.Value
	}
	before := deadlocks()

	// Each round writes one event per key, the keys concurrently, and then
	// pauses: traffic at a pace the relays keep up with.
	for seq := range rounds {
		var wg sync.WaitGroup
		for k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.sendKeyed(fmt.Sprintf("key-%02d", k), seq)
			}()
		}
		wg.Wait()
		time.Sleep(20 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return pub.distinct() == keys*rounds }, time.Minute, 50*time.Millisecond)
	require.Eventually(t, func() bool { return e.stats().Sent == keys*rounds }, waitFor, tick)
	var remarked int64
	for _, r := range rs {
		remarked += r.remarked.Load()
	}
	t.Logf("deadlocks on the server meanwhile (any client): %d; failed claims marked again: %d", deadlocks()-before, remarked)
	require.Empty(t, pub.duplicates(), "rows published twice")
	for k, seqs := range perKey(t, pub.published()) {
		for i, s := range seqs {
			require.Equal(t, i, s, "order of %s", k)
		}
	}
}

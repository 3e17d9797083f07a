package outbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
)

// A relay that asked for a bucket and then died must not count as live
// forever: its ask would shrink the fair share of the live relays, and the
// buckets it held would stay unowned after its leases expired, their rows
// never published. (Found by the chaos suite: a relay SIGKILLed while its
// ask was pending.)
func TestOrderedRelayIgnoresDeadRelaysAsk(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()

	// One pending row per bucket.
	have := map[int]bool{}
	for i := 0; len(have) < DefaultBuckets && i < 1000; i++ {
		key := fmt.Sprintf("key-%d", i)
		b := bucketOf(key, DefaultBuckets)
		if have[b] {
			continue
		}
		have[b] = true
		_, err := e.ob.Transact(ctx, e.msg(`{}`, withKey(key)), func(context.Context, *gorm.DB) error { return nil })
		require.NoError(t, err)
	}
	require.Len(t, have, DefaultBuckets)

	// Buckets 0-7: held by the live relay, bucket 0 asked for by the dead
	// one long ago. Buckets 8-15: the dead relay's, expired.
	now := time.Now().UTC()
	for b := range DefaultBuckets {
		l := Lease{Bucket: b, Owner: "relay-live", ExpiresAt: now.Add(time.Minute), WantedAt: time.Unix(1, 0).UTC()}
		if b == 0 {
			l.WantedBy, l.WantedAt = "relay-dead", now.Add(-time.Minute)
		}
		if b >= DefaultBuckets/2 {
			l.Owner, l.ExpiresAt = "relay-dead", now.Add(-time.Minute)
		}
		require.NoError(t, e.db.Table(DefaultTable+leaseSuffix).Create(&l).Error)
	}

	pub := newMemPublisher()
	r, err := NewRelay(e.ob, pub, RelayConfig{Name: "relay-live", Ordered: true, Logger: testLogger(t),
		PollInterval: 100 * time.Millisecond, LeaseTTL: 3 * time.Second, SettleDelay: time.Millisecond})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool { return len(e.rows("status = ?", StatusSent)) == DefaultBuckets }, 15*time.Second, 100*time.Millisecond,
		"the dead relay's expired buckets were never taken over")
	var ghost int64
	require.NoError(t, e.db.Table(DefaultTable+leaseSuffix).Where("wanted_by = ?", "relay-dead").Count(&ghost).Error)
	require.Zero(t, ghost, "the stale ask is cleared")
}

// evenlySpread reports whether the relays named hold every bucket between
// them, each its exact share: Buckets/len(names) or one more, and no one
// else holds any.
func evenlySpread(owners map[string]int, names []string) bool {
	if len(owners) != min(len(names), DefaultBuckets) {
		return false
	}
	lo := DefaultBuckets / len(names)
	hi := lo
	if DefaultBuckets%len(names) != 0 {
		hi++
	}
	total := 0
	for _, name := range names {
		n := owners[name]
		if n < lo || n > hi {
			return false
		}
		total += n
	}
	return total == DefaultBuckets
}

// waitEven waits up to window for the relays named to hold every bucket,
// each its exact share, and fails the test with the last spread seen
// otherwise.
func (e *env) waitEven(names []string, window time.Duration, what string) map[string]int {
	e.t.Helper()
	var last map[string]int
	if !assert.Eventually(e.t, func() bool {
		last = e.owners()
		return evenlySpread(last, names)
	}, window, tick) {
		e.t.Fatalf("%s: not evenly spread over %v: %v", what, names, last)
	}
	return last
}

// rounds returns the lease rounds each relay has run.
func rounds(relays []*Relay) []int64 {
	out := make([]int64, len(relays))
	for i, r := range relays {
		out[i] = r.leaseRounds.Load()
	}
	return out
}

// maxSince returns the most lease rounds any relay ran since before.
func maxSince(relays []*Relay, before []int64) int64 {
	var most int64
	for i, r := range relays {
		most = max(most, r.leaseRounds.Load()-before[i])
	}
	return most
}

// maxSpreadRounds is how many lease rounds a relay may take to reach its
// exact share after the relays changed: the change shows in the relay
// table at the others' next round, a relay above its share gives buckets
// up at that round and a short one takes them at its next. The rest is
// margin for a loaded machine, whose rounds come late and out of step.
const maxSpreadRounds = 8

// TestRelaysJoinOneByOne: sixteen ordered relays join one after another
// while keyed rows keep coming. After each join every relay holds exactly
// its share, Buckets/relays or one more, within a few lease rounds;
// once the spread is even the leases stay put; and every key's rows go
// out in order across all the hand-overs.
func TestRelaysJoinOneByOne(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "a load test of lease hand-overs, which no collation or isolation level changes")
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	const ttl = 2 * time.Second
	cfg := func(name string) RelayConfig {
		return RelayConfig{Name: name, Ordered: true, LeaseTTL: ttl, BatchSize: 50, MaxAttempts: -1}
	}

	stop := make(chan struct{})
	var writer sync.WaitGroup
	var sent atomic.Int64
	writer.Add(1)
	go func() {
		defer writer.Done()
		for seq := 0; ; seq++ {
			for k := range 20 {
				select {
				case <-stop:
					return
				default:
				}
				e.sendKeyed(fmt.Sprintf("key-%02d", k), seq)
				sent.Add(1)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		writer.Wait()
	}()

	var relays []*Relay
	var names []string
	var least int64
	for i := range DefaultBuckets {
		name := fmt.Sprintf("r%02d", i)
		before := rounds(relays)
		r := e.relay(pub, cfg(name))
		start(t, r)
		relays, names = append(relays, r), append(names, name)
		before = append(before, 0)
		last := e.waitEven(names, 10*ttl, fmt.Sprintf("%d relays", len(relays)))
		least += int64(last[name]) // each of its buckets moved at least once
		took := maxSince(relays, before)
		t.Logf("%2d relays: even after %d lease rounds: %v", len(relays), took, last)
		require.LessOrEqual(t, took, int64(maxSpreadRounds), "%d relays: lease rounds to an even spread", len(relays))
	}

	// Even: three more rounds of every relay move nothing.
	moves := func() (n int64) {
		for _, r := range relays {
			n += r.leaseMoves.Load()
		}
		return n
	}
	// The round that made the spread even may still be counting its
	// moves: start after one more round of every relay.
	roundsOfAll := func(n int64) {
		before := rounds(relays)
		require.Eventually(t, func() bool {
			for i, r := range relays {
				if r.leaseRounds.Load()-before[i] < n {
					return false
				}
			}
			return true
		}, 10*ttl, tick)
	}
	roundsOfAll(1)
	movedBefore := moves()
	roundsOfAll(3)
	require.Equal(t, movedBefore, moves(), "no bucket moves once the spread is even")
	least -= DefaultBuckets // the first relay took them free
	t.Logf("%d buckets handed over or released in all; the joins needed at least %d", moves(), least)
	require.LessOrEqual(t, moves(), 2*least, "buckets moved back and forth")

	close(stop)
	writer.Wait()
	require.Eventually(t, func() bool { return int64(pub.distinct()) == sent.Load() }, time.Minute, tick)
	// No copies: when InnoDB picks a claim transaction as a deadlock
	// victim after it published (an ordered relay's read of its bucket
	// runs into the first row of the next bucket while that bucket's owner
	// marks it), the owner marks the rows in a new transaction before it
	// claims again.
	require.Empty(t, pub.duplicates(), "rows published twice")
	var remarked int64
	for _, r := range relays {
		remarked += r.remarked.Load()
	}
	t.Logf("%d failed claims marked in a new transaction", remarked)
	for k, seqs := range perKey(t, pub.published()) {
		for i, s := range seqs {
			require.Equal(t, i, s, "order of %s", k)
		}
	}
}

// TestDeadRelayStopsCounting: a relay in a child process is SIGKILLed
// while it holds its share of the buckets next to three others. It leaves
// its row in the relay table and its leases behind; after LeaseTTL it no
// longer counts, and the three take its buckets, each ending with its
// exact share of sixteen. A relay that stops cleanly deregisters at once,
// and the row of a relay dead for long is deleted.
func TestDeadRelayStopsCounting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	longGone := Member{Name: "long-gone", SeenAt: time.Now().UTC().Add(-forgetAfter*killChildTTL - time.Minute)}
	require.NoError(t, e.db.Table(DefaultTable+relaySuffix).Create(&longGone).Error)

	child := startKillChild(t, e)
	require.Eventually(t, func() bool { return e.owners()["child"] == DefaultBuckets }, time.Minute, tick,
		"the child relay takes every bucket")

	pub := newMemPublisher()
	var relays []*Relay
	var runs []*running
	for _, name := range []string{"a", "b", "c"} {
		r := e.relay(pub, RelayConfig{Name: name, LeaseTTL: killChildTTL})
		relays = append(relays, r)
		runs = append(runs, start(t, r))
	}
	e.waitEven([]string{"a", "b", "c", "child"}, 10*killChildTTL, "four relays")

	members, err := e.ob.Members(ctx)
	require.NoError(t, err)
	names := func(ms []Member) (out []string) {
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	require.Equal(t, []string{"a", "b", "c", "child"}, names(members), "every relay registered; the row of a relay long gone is deleted")

	before := rounds(relays)
	child.kill(t)
	last := e.waitEven([]string{"a", "b", "c"}, 10*killChildTTL, "the three survivors of the kill")
	took := maxSince(relays, before)
	t.Logf("survivors even %d lease rounds after the kill (LeaseTTL is 3 rounds): %v", took, last)
	require.LessOrEqual(t, took, int64(3+maxSpreadRounds), "lease rounds from the kill to an even spread")
	members, err = e.ob.Members(ctx)
	require.NoError(t, err)
	require.Contains(t, names(members), "child", "a killed relay leaves its row, which stops counting after LeaseTTL")

	require.NoError(t, runs[0].stop(t))
	members, err = e.ob.Members(ctx)
	require.NoError(t, err)
	require.NotContains(t, names(members), "a", "a relay that stops deregisters")
	e.waitEven([]string{"b", "c"}, 10*killChildTTL, "after a relay stopped")
}

// TestRelaysWithoutRelayTable: on tables of an earlier release, before
// Migrate adds the relay table, relays still share the buckets, counting
// one another from the lease table; once Migrate has run they register.
func TestRelaysWithoutRelayTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	require.NoError(t, e.db.Migrator().DropTable(DefaultTable+relaySuffix))
	pub := newMemPublisher()
	for _, name := range []string{"a", "b"} {
		start(t, e.relay(pub, RelayConfig{Name: name, LeaseTTL: time.Second}))
	}
	e.waitEven([]string{"a", "b"}, 10*time.Second, "without the relay table")
	e.send(20, "old-tables")
	require.Eventually(t, func() bool { return pub.distinct() == 20 }, waitFor, tick)
	members, err := e.ob.Members(ctx)
	require.NoError(t, err)
	require.Empty(t, members)

	require.NoError(t, e.ob.Migrate(ctx))
	require.Eventually(t, func() bool {
		members, err = e.ob.Members(ctx)
		require.NoError(t, err)
		return len(members) == 2
	}, 10*time.Second, tick, "the relays register once the table exists")
}

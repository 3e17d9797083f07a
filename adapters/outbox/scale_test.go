package outbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// inFlight wraps a publisher and records every message that two Publish
// calls held at the same time, which would mean two relays claimed one
// row at once.
type inFlight struct {
	inner txmsg.Publisher
	mu    sync.Mutex
	now   map[string]bool
	twice []string
	n     *atomic.Int64
}

func (p *inFlight) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		if p.now[m.ID] {
			p.twice = append(p.twice, m.ID)
		}
		p.now[m.ID] = true
	}
	p.mu.Unlock()
	err := p.inner.Publish(ctx, msgs...)
	p.mu.Lock()
	for _, m := range msgs {
		delete(p.now, m.ID)
	}
	p.mu.Unlock()
	if err == nil && p.n != nil {
		p.n.Add(int64(len(msgs)))
	}
	return err
}

// owners returns how many live bucket leases each relay holds.
func (e *env) owners() map[string]int {
	var leases []Lease
	require.NoError(e.t, e.db.Table(e.ob.Table()+leaseSuffix).Where("expires_at > ?", time.Now().UTC()).Find(&leases).Error)
	out := map[string]int{}
	for _, l := range leases {
		if l.Owner != "" {
			out[l.Owner]++
		}
	}
	return out
}

// TestUnorderedRelaysShareBacklog: six unordered relays drain 12,000 rows
// written in small transactions, including rows whose bucket lies outside
// the relays' range; every row is published exactly once, no message is
// ever in two Publish calls at once, every relay takes a share and each
// ends up owning its own buckets.
func TestUnorderedRelaysShareBacklog(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "a load test of relays sharing a backlog, which no collation or isolation level changes")
	t.Parallel()
	e := newEnv(t, Config{})
	const n, relays = 12000, 6
	e.enqueue(n, func(i int) *txmsg.Message { return e.msg(fmt.Sprintf("m-%d", i)) })
	// Rows written with another Buckets setting, or by hand.
	require.NoError(t, e.db.Table(DefaultTable).Where("id % 100 = 0").Update("bucket", 1000).Error)
	require.NoError(t, e.db.Table(DefaultTable).Where("id % 100 = 1").Update("bucket", -1).Error)

	mem := newMemPublisher()
	pub := &inFlight{inner: mem, now: map[string]bool{}}
	var per [relays]atomic.Int64
	for i := range relays {
		counted := countingPublisher{newMemPublisher(), &per[i]}
		start(t, e.relay(chain{pub, counted}, RelayConfig{BatchSize: 100, LeaseTTL: 2 * time.Second, Name: fmt.Sprintf("relay-%d", i)}))
	}
	require.Eventually(t, func() bool { return e.stats().Sent == n }, 2*time.Minute, 50*time.Millisecond)
	require.Equal(t, n, mem.distinct())
	require.Empty(t, mem.duplicates(), "no row published twice")
	pub.mu.Lock()
	require.Empty(t, pub.twice, "no row in two Publish calls at once")
	pub.mu.Unlock()
	for i := range relays {
		t.Logf("relay-%d published %d", i, per[i].Load())
	}
	// Every relay works once the leases are spread: after the first rows,
	// a second backlog is shared by all.
	var last map[string]int
	require.Eventually(t, func() bool {
		last = e.owners()
		return len(last) == relays
	}, time.Minute, tick, "every relay owns buckets: %v", last)
	for i := range relays {
		per[i].Store(0)
	}
	e.enqueue(n, func(i int) *txmsg.Message { return e.msg(fmt.Sprintf("second-%d", i)) })
	require.Eventually(t, func() bool { return e.stats().Sent == 2*n }, 2*time.Minute, 50*time.Millisecond)
	require.Empty(t, mem.duplicates())
	for i := range relays {
		require.Positive(t, per[i].Load(), "relay-%d took a share of the second backlog (leases %v)", i, last)
	}
}

// chain publishes through first and then, when that worked, records in
// second.
type chain struct{ first, second txmsg.Publisher }

func (c chain) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	if err := c.first.Publish(ctx, msgs...); err != nil {
		return err
	}
	return c.second.Publish(ctx, msgs...)
}

// TestUnorderedRelayJoins: one relay owns every bucket; a second one
// joins and gets half of them, and a stopped relay's buckets go back.
func TestUnorderedRelayJoins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	cfg := func(name string) RelayConfig { return RelayConfig{Name: name, LeaseTTL: time.Second} }
	a := start(t, e.relay(pub, cfg("a")))
	require.Eventually(t, func() bool { return e.owners()["a"] == DefaultBuckets }, waitFor, tick, "a single relay owns every bucket")
	e.send(50, "alone")
	require.Eventually(t, func() bool { return pub.distinct() == 50 }, waitFor, tick)

	var nb atomic.Int64
	start(t, e.relay(countingPublisher{pub, &nb}, cfg("b")))
	var last map[string]int
	require.Eventually(t, func() bool {
		last = e.owners()
		return last["a"] == DefaultBuckets/2 && last["b"] == DefaultBuckets/2
	}, waitFor, tick, "b takes half: %v", last)
	e.send(200, "shared")
	require.Eventually(t, func() bool { return pub.distinct() == 250 }, waitFor, tick)
	// b counts its rows when its Publish call returns, just after they
	// show as published.
	require.Eventually(t, func() bool { return nb.Load() > 0 }, waitFor, tick, "b publishes rows of its buckets")

	require.NoError(t, a.stop(t))
	require.Eventually(t, func() bool { return e.owners()["b"] == DefaultBuckets }, waitFor, tick, "a's buckets move to b")
	e.send(50, "after")
	require.Eventually(t, func() bool { return pub.distinct() == 300 }, waitFor, tick)
	require.Empty(t, pub.duplicates())
}

const (
	killChildDSN = "TXMSG_TEST_KILL_CHILD_DSN"
	killChildTTL = 2 * time.Second
	// killChildSkew, when set, is a duration the child relay's clock is ahead by.
	killChildSkew = "TXMSG_TEST_KILL_CHILD_SKEW"
)

// TestUnorderedKilledRelayHandsOver: a relay in a child process owns every
// bucket and is SIGKILLed in the middle of a backlog, leaving its leases
// behind. A relay started at that moment takes the buckets once the dead
// relay's leases run out and drains the rest; nothing is left pending.
func TestUnorderedKilledRelayHandsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	const n = 3000
	e.enqueue(n, func(i int) *txmsg.Message { return e.msg(fmt.Sprintf("k-%d", i)) })

	child := startKillChild(t, e)
	require.Eventually(t, func() bool {
		return e.owners()["child"] == DefaultBuckets && e.stats().Sent > 0
	}, time.Minute, tick, "the child relay takes every bucket and publishes")
	child.kill(t)
	killed := time.Now()
	left := e.stats().Pending
	require.Positive(t, left, "the child was killed mid-backlog; child output:\n%s", child.out.String())
	var expiry time.Time
	require.NoError(t, e.db.Table(DefaultTable+leaseSuffix).Select("MAX(expires_at)").Where("owner = ?", "child").Scan(&expiry).Error)

	pub := newMemPublisher()
	start(t, e.relay(pub, RelayConfig{Name: "survivor", LeaseTTL: killChildTTL}))
	require.Eventually(t, func() bool { return e.owners()["survivor"] == DefaultBuckets }, time.Minute, tick,
		"the dead relay's buckets are taken over")
	t.Logf("buckets taken over %s after the kill (child's last lease expired %s after it, TTL %s)",
		time.Since(killed).Round(time.Millisecond), expiry.Sub(killed).Round(time.Millisecond), killChildTTL)
	require.Eventually(t, func() bool { return e.stats().Pending == 0 }, time.Minute, tick)
	require.EqualValues(t, n, e.stats().Sent)
	require.GreaterOrEqual(t, int64(pub.distinct()), left, "the survivor published what the child left")
}

// slowPublisher takes a while per call, so that the child relay is still
// busy when it is killed.
type slowPublisher struct{}

func (slowPublisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	time.Sleep(20 * time.Millisecond)
	return nil
}

// TestUnorderedKilledRelayChild is the relay process of
// TestUnorderedKilledRelayHandsOver and TestDeadRelayStopsCounting; it
// runs only when one of them starts it.
func TestUnorderedKilledRelayChild(t *testing.T) {
	dsn := os.Getenv(killChildDSN)
	if dsn == "" {
		t.Skip("runs as a child of TestUnorderedKilledRelayHandsOver or TestDeadRelayStopsCounting")
	}
	db, err := testbed.Open(dsn)
	require.NoError(t, err)
	ob, err := New(db, Config{Logger: testLogger(t)})
	require.NoError(t, err)
	r, err := NewRelay(ob, slowPublisher{}, RelayConfig{Name: "child", BatchSize: 10, LeaseTTL: killChildTTL, Logger: testLogger(t)})
	require.NoError(t, err)
	if s := os.Getenv(killChildSkew); s != "" {
		skew, err := time.ParseDuration(s)
		require.NoError(t, err)
		r.now = func() time.Time { return time.Now().Add(skew) }
	}
	require.NoError(t, r.Run(context.Background()))
}

// TestMigrateAddsBucketDueIndex: a table created before unordered relays
// claimed by bucket, without idx_outbox_bucket_due, gets the index from
// Migrate, and its pending rows drain.
func TestMigrateAddsBucketDueIndex(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	ddl, err := os.ReadFile("outbox.sql")
	require.NoError(t, err)
	var old []string
	for _, line := range strings.Split(string(ddl), "\n") {
		if !strings.Contains(line, "idx_outbox_bucket_due") {
			old = append(old, line)
		}
	}
	for _, stmt := range strings.Split(strings.Join(old, "\n"), ";") {
		if strings.Contains(stmt, "CREATE TABLE") {
			require.NoError(t, db.Exec(stmt).Error)
		}
	}
	ob, err := New(db, Config{Logger: testLogger(t)})
	require.NoError(t, err)
	e := &env{t: t, db: db, ob: ob, topic: "outbox_test_topic"}
	e.enqueue(100, func(i int) *txmsg.Message { return e.msg(fmt.Sprintf("old-%d", i)) })
	hasIndex := func() bool {
		var n int64
		require.NoError(t, db.Raw(`SELECT COUNT(*) FROM information_schema.STATISTICS
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = 'idx_outbox_bucket_due'`, DefaultTable).Scan(&n).Error)
		return n > 0
	}
	require.False(t, hasIndex())
	require.NoError(t, ob.Migrate(context.Background()))
	require.True(t, hasIndex(), "Migrate adds the index")

	pub := newMemPublisher()
	start(t, e.relay(pub, RelayConfig{}))
	require.Eventually(t, func() bool { return e.stats().Sent == 100 }, waitFor, tick)
	require.Empty(t, pub.duplicates())
}

// TestAsManyRelaysAsBuckets: sixteen relays start together on sixteen
// buckets and each ends up owning one within a few lease rounds. Every
// relay registers in the relay table at its first round, so at its second
// each knows there are sixteen: the first relays, which took many buckets
// while they saw few others, give the excess up, and the others take it.
func TestAsManyRelaysAsBuckets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	pub := newMemPublisher()
	const ttl = time.Second
	var relays []*Relay
	var names []string
	for i := range DefaultBuckets {
		name := fmt.Sprintf("r%02d", i)
		r := e.relay(pub, RelayConfig{Name: name, LeaseTTL: ttl})
		relays, names = append(relays, r), append(names, name)
	}
	for _, r := range relays {
		start(t, r)
	}
	// The window (60 lease rounds) is generous for a loaded machine; the
	// rounds are what the test checks.
	e.waitEven(names, 20*ttl, "sixteen relays started together")
	took := maxSince(relays, make([]int64, len(relays)))
	var moved int64
	for _, r := range relays {
		moved += r.leaseMoves.Load()
	}
	t.Logf("one bucket each after %d lease rounds; %d buckets handed over or released", took, moved)
	require.LessOrEqual(t, took, int64(maxSpreadRounds), "lease rounds to one bucket each")
}

// killChild is a relay in a child process (TestUnorderedKilledRelayChild)
// on e's database, named "child", for a test to SIGKILL.
type killChild struct {
	cmd    *exec.Cmd
	exited chan struct{}
	out    *strings.Builder
}

// startKillChild starts a killChild; it is killed, if still running, when
// t ends, and its output is logged when t failed.
// Extra environment variables (NAME=value) go to the child.
func startKillChild(t *testing.T, e *env, environ ...string) *killChild {
	t.Helper()
	c := &killChild{exited: make(chan struct{}), out: &strings.Builder{}}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestUnorderedKilledRelayChild$", "-test.v", "-test.count=1")
	c.cmd.Env = append(append(os.Environ(), killChildDSN+"="+e.dsn), environ...)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	require.NoError(t, c.cmd.Start())
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("child output:\n%s", c.out.String())
		}
	})
	return c
}

// kill SIGKILLs the child and waits until it is gone.
func (c *killChild) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	<-c.exited
}

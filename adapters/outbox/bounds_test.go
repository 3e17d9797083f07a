package outbox

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// slowStart adds a broker round trip of delay to every Publish call until
// until, as a remote or struggling broker would.
type slowStart struct {
	inner txmsg.Publisher
	delay time.Duration
	until time.Time
}

func (p slowStart) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	if time.Now().Before(p.until) {
		time.Sleep(p.delay)
	}
	return p.inner.Publish(ctx, msgs...)
}

// TestBrokerOrderedHotKeyDrains: one key holds 2,000 pending rows. Its
// ordered relays publish them one per broker round trip, and the broker
// answers slowly (130 ms) for the first minute. The rows drain in order
// and no row is stored on the broker twice: no claim runs so long that its
// transaction outlives its deadline, rolls back after publishing and
// publishes the same rows again.
func TestBrokerOrderedHotKeyDrains(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "a load test of one hot key, which no collation or isolation level changes")
	t.Parallel()
	e := brokerEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	const n = 2000
	e.enqueue(n, func(i int) *txmsg.Message {
		return &txmsg.Message{Topic: e.topic, ShardingKey: "hot", Body: fmt.Appendf(nil, "hot:%d", i)}
	})
	pub := slowStart{inner: brokerPublisher(t), delay: 130 * time.Millisecond, until: time.Now().Add(65 * time.Second)}
	for i := range 2 {
		start(t, e.relay(pub, RelayConfig{
			Name: fmt.Sprintf("hot-%d", i), Ordered: true, PublishTimeout: time.Second, LeaseTTL: 2 * time.Second,
			MaxAttempts: -1, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		}))
	}
	require.Eventually(t, func() bool {
		return e.stats().Sent == n || storedTwice(obs) != ""
	}, 5*time.Minute, 100*time.Millisecond)
	require.Empty(t, storedTwice(obs), "a row stored on the broker twice")
	require.Eventually(t, func() bool { return obs.Distinct() == n }, time.Minute, 100*time.Millisecond)
	require.Empty(t, storedTwice(obs))

	stored := obs.Order()
	sort.SliceStable(stored, func(i, j int) bool { return stored[i].QueueOffset < stored[j].QueueOffset })
	next := 0
	last := int64(-1)
	for _, m := range stored {
		if m.QueueOffset == last {
			continue // a redelivery to the observer
		}
		last = m.QueueOffset
		require.Equal(t, fmt.Sprintf("hot:%d", next), string(m.Body))
		next++
	}
	require.Equal(t, n, next)
}

// storedTwice returns an ID the broker stored at two offsets, or "".
func storedTwice(obs *testbed.Observer) string {
	offsets := map[string]map[string]bool{}
	for _, m := range obs.Order() {
		id := m.GetProperty(txmsg.PropertyID)
		if offsets[id] == nil {
			offsets[id] = map[string]bool{}
		}
		offsets[id][fmt.Sprintf("%d/%d", m.Queue.QueueId, m.QueueOffset)] = true
		if len(offsets[id]) > 1 {
			return id
		}
	}
	return ""
}

// Environment of the relay child process of TestRelayMemoryBounded.
const (
	memChildDSN   = "TXMSG_TEST_MEM_CHILD_DSN"
	memChildTopic = "TXMSG_TEST_MEM_CHILD_TOPIC"
)

// memBound is the most Go heap the relay may take from the OS while it
// drains memRows bodies of almost 4 MiB (256 MB in all). A relay that
// loads a whole claim's bodies at once, as before the byte budget, takes
// about twice the bodies it holds (measured with 200 rows: 1.6 GiB of
// heap), so it fails here; with the budget the heap stays near 60 MiB
// whatever the number of rows (the same with 200 rows).
const memBound = 256 << 20

// memRows is the number of rows TestRelayMemoryBounded drains. The bodies
// are incompressible and the client deflates every large body, which the
// race detector makes slow: 64 keeps the test to a few minutes under
// -race, with as many bytes of bodies as memBound: twice that for a relay
// without the budget.
const memRows = 64

// TestRelayMemoryBounded: memRows rows with bodies of almost 4 MiB (the test
// broker's maxMessageSize is the default 4 MiB) drain through a relay in a
// child process, publishing to the real broker, and the relay's Go heap
// never takes more than memBound from the OS: claims load bodies within
// their byte budget instead of whole batches.
func TestRelayMemoryBounded(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "it measures the relay's memory, which no collation or isolation level changes")
	t.Parallel()
	e := brokerEnv(t)
	const n = memRows
	body := make([]byte, 4<<20-64<<10)
	_, _ = rand.Read(body) // incompressible: the client compresses large bodies
	for start := 0; start < n; start += 10 {
		require.NoError(t, e.db.Transaction(func(tx *gorm.DB) error {
			for i := start; i < min(start+10, n); i++ {
				b := append(fmt.Appendf(nil, "%04d", i), body[4:]...)
				if err := e.ob.EnqueueTx(context.Background(), tx, &txmsg.Message{Topic: e.topic, Body: b}); err != nil {
					return err
				}
			}
			return nil
		}))
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayMemoryChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), memChildDSN+"="+e.dsn, memChildTopic+"="+e.topic)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	stats := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "relay memory:"); ok {
			for _, f := range strings.Fields(rest) {
				k, v, _ := strings.Cut(f, "=")
				stats[k], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	require.Contains(t, stats, "heap_sys", "child:\n%s", out)
	t.Logf("relay child: heap_sys %d MiB, peak heap objects %d MiB, peak RSS %d MiB",
		stats["heap_sys"]>>20, stats["peak_heap"]>>20, stats["vm_hwm_kb"]>>10)
	require.EqualValues(t, n, e.stats().Sent)
	require.Less(t, stats["heap_sys"], int64(memBound), "the relay's heap stays bounded")
}

// TestRelayMemoryChild is the relay process of TestRelayMemoryBounded; it
// runs only when that test starts it.
func TestRelayMemoryChild(t *testing.T) {
	dsn := os.Getenv(memChildDSN)
	if dsn == "" {
		t.Skip("runs as a child of TestRelayMemoryBounded")
	}
	testbed.QuietClientLogs()
	db, err := testbed.Open(dsn)
	require.NoError(t, err)
	ob, err := New(db, Config{Logger: testLogger(t)})
	require.NoError(t, err)
	pub := brokerPublisher(t)
	r, err := NewRelay(ob, pub, RelayConfig{Logger: testLogger(t), PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)

	var peak uint64
	var mu sync.Mutex
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		peak = max(peak, ms.HeapAlloc)
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	stopSampling, samplerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(samplerDone)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
				sample()
			}
		}
	}()
	// Generous: a race build compresses the bodies slowly, and the test
	// measures memory, never speed.
	deadline := time.Now().Add(12 * time.Minute)
	var s Stats
	for time.Now().Before(deadline) {
		if s, err = ob.Stats(context.Background()); err == nil && s.Pending == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	<-done
	close(stopSampling)
	<-samplerDone
	sample()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("relay memory: heap_sys=%d peak_heap=%d vm_hwm_kb=%d\n", ms.HeapSys, peak, vmHWM())
	require.NoError(t, err)
	require.Zero(t, s.Pending, "not drained: %+v", s)
}

// vmHWM is the process's peak resident set in KiB, from /proc; 0 where
// there is none.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

package txrmq

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// The tests of this file run on the two-broker cluster of
// scripts/rocketmq.sh (make test-cluster) and skip without it. They kill
// the cluster's brokers: never parallel.

const clusterChildEnv = "TXMSG_CLUSTER_CHILD"

// checkBackRecorder records the txIDs whose check-backs this process
// answered.
type checkBackRecorder struct {
	mu  sync.Mutex
	ids map[string]txmsg.LocalState
}

func (r *checkBackRecorder) OnCheckBack(_ string, txID, _ string, state txmsg.LocalState, _ error, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = map[string]txmsg.LocalState{}
	}
	r.ids[txID] = state
}

func (r *checkBackRecorder) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.ids[id]
	return ok
}

// TestClusterChildProcess is a producer of the group in a process of its
// own: it runs n transactions at once, with sharding keys spread over the
// topic's queues on both brokers, and SIGKILLs itself once all n local
// transactions have committed, before any END_TRANSACTION: n half
// messages are left for check-backs (or, with no producer of the group
// left, for the sweeper).
func TestClusterChildProcess(t *testing.T) {
	spec := os.Getenv(clusterChildEnv)
	if spec == "" {
		t.Skip("runs only as a child of the cluster tests")
	}
	parts := strings.Split(spec, "|")
	require.Len(t, parts, 5)
	dsn, topic, group, prefix := parts[0], parts[1], parts[2], parts[3]
	n, err := strconv.Atoi(parts[4])
	require.NoError(t, err)
	db, err := testbed.Open(dsn)
	require.NoError(t, err)
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	var committed atomic.Int32
	hook := pointHook{afterLocal: func(_ *txmsg.Message, state txmsg.LocalState) {
		if state != txmsg.StateCommitted {
			return
		}
		if committed.Add(1) == int32(n) {
			fmt.Println("KILL-POINT after-local-commit")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		select {} // no END_TRANSACTION leaves this process
	}}
	tr, err := NewTransactional(db, chk, TransactionalConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: group, Hooks: txmsg.Hooks{hook},
		Topics: []string{topic},
	})
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(id string) {
			_, err := tr.Transact(context.Background(), &txmsg.Message{ID: id, Topic: topic, ShardingKey: id, Body: []byte(id)}, createOrder(id))
			errs <- err
		}(fmt.Sprintf("%s-%d", prefix, i))
	}
	select {
	case err := <-errs:
		t.Fatalf("a transaction returned (%v); the child should have been killed after all %d local commits", err, n)
	case <-time.After(2 * time.Minute):
		t.Fatalf("only %d of %d local transactions committed", committed.Load(), n)
	}
}

// runClusterChild runs TestClusterChildProcess and waits until it killed
// itself.
func runClusterChild(t *testing.T, e *txEnv, prefix string, n int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), clusterChildEnv+"="+strings.Join([]string{e.dsn, e.topic, e.group, prefix, strconv.Itoa(n)}, "|"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "child output:\n%s", out)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child not killed:\n%s", out)
	require.Contains(t, string(out), "KILL-POINT after-local-commit")
}

// Three producers of one group, each with a client of its own: two in
// this process and one child process, which commits 16 transactions over
// the queues of both brokers and is SIGKILLed after its local commits,
// before any END_TRANSACTION. The survivors' own transactions spread over
// both brokers and end without a check-back (END_TRANSACTION reached the
// broker holding each half message); every one of the child's 16 is
// answered COMMIT from the barrier by a survivor, from both brokers; every
// event arrives once.
func TestClusterTransactionsOverBothBrokers(t *testing.T) {
	brokers := testbed.RequireCluster(t)
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	var cb1, cb2 checkBackRecorder
	e.start(t, e.db, e.chk, nil, &cb2)
	var own []string
	p1 := e.start(t, e.db, e.chk, nil, &cb1)
	for i := 0; i < 16; i++ {
		id := fmt.Sprintf("own-%s-%d", testbed.Suffix(), i)
		_, err := p1.Transact(context.Background(), &txmsg.Message{ID: id, Topic: e.topic, ShardingKey: id, Body: []byte(id)}, createOrder(id))
		require.NoError(t, err)
		own = append(own, id)
	}
	prefix := "child-" + testbed.Suffix()
	runClusterChild(t, e, prefix, 16)

	ownFrom, childFrom := map[string]int{}, map[string]int{}
	for _, id := range own {
		obs.DeliveredOnce(t, id)
		ownFrom[obs.First(id).Queue.BrokerName]++
	}
	for i := 0; i < 16; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		obs.DeliveredOnce(t, id)
		require.Equal(t, checker.StateCommitted, e.barrier(t, id))
		childFrom[obs.First(id).Queue.BrokerName]++
	}
	for _, b := range brokers {
		require.Positive(t, ownFrom[b.Name], "none of the survivors' events came from %s: %v", b.Name, ownFrom)
		require.Positive(t, childFrom[b.Name], "none of the killed child's events came from %s: %v", b.Name, childFrom)
	}
	for i := 0; i < 16; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		require.True(t, cb1.has(id) || cb2.has(id), "%s of the killed child was not checked back by a survivor", id)
	}
	for _, id := range own {
		require.False(t, cb1.has(id) || cb2.has(id), "%s was checked back: END_TRANSACTION did not reach its broker", id)
	}
	require.EqualValues(t, 32, e.orders(t))
}

// broker-a is SIGKILLed while transactions and plain publishes run: sends
// fail over to broker-b, every committed transaction and every publish
// that returned nil is delivered, and the half messages a killed producer
// left on broker-a are resolved by check-backs when broker-a returns.
func TestClusterBrokerKillFailsOverAndLosesNothing(t *testing.T) {
	brokers := testbed.RequireCluster(t)
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	tr := e.start(t, e.db, e.chk, nil)
	pub := newTestPublisher(t, 0)

	// Half messages of a producer killed after its local commits, some on
	// broker-a: only check-backs can end them.
	prefix := "child-" + testbed.Suffix()
	runClusterChild(t, e, prefix, 8)

	var (
		mu        sync.Mutex
		committed []string
		published []string
		failed    atomic.Int32
		afterKill atomic.Int32
		killed    atomic.Bool
	)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("tx-%d-%d-%s", w, i, testbed.Suffix())
				rc, err := tr.Transact(context.Background(), &txmsg.Message{ID: id, Topic: e.topic, ShardingKey: id, Body: []byte(id)}, createOrder(id))
				if err == nil && rc.State == txmsg.StateCommitted {
					mu.Lock()
					committed = append(committed, id)
					mu.Unlock()
					if killed.Load() {
						afterKill.Add(1)
					}
				} else {
					failed.Add(1)
				}
				pid := "pub-" + id
				if err := pub.Publish(context.Background(), &txmsg.Message{ID: pid, Topic: e.topic, Body: []byte(pid)}); err == nil {
					mu.Lock()
					published = append(published, pid)
					mu.Unlock()
				}
				time.Sleep(50 * time.Millisecond)
			}
		}(w)
	}
	time.Sleep(2 * time.Second)
	testbed.KillClusterBroker(t, brokers[0].Name)
	killed.Store(true)
	require.Eventually(t, func() bool { return afterKill.Load() >= 20 }, 60*time.Second, 100*time.Millisecond,
		"transactions did not fail over to %s", brokers[1].Name)
	testbed.StartClusterBroker(t, brokers[0].Name)
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	t.Logf("%d committed, %d published, %d failed (during the fail-over)", len(committed), len(published), failed.Load())

	for _, id := range append(committed, published...) {
		obs.Delivered(t, id)
	}
	fromA := 0
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		obs.Delivered(t, id)
		require.Equal(t, checker.StateCommitted, e.barrier(t, id))
		if obs.First(id).Queue.BrokerName == brokers[0].Name {
			fromA++
		}
	}
	require.Positive(t, fromA, "none of the killed producer's messages was stored on %s", brokers[0].Name)
	var orders int64
	require.NoError(t, e.db.Model(&order{}).Count(&orders).Error)
	require.EqualValues(t, len(committed)+8, orders)
}

// startGroupSweeper runs a sweeper of e's producer group that republishes
// through pub, and returns its log.
func startGroupSweeper(t *testing.T, e *txEnv, pub *Publisher) *logRecorder {
	t.Helper()
	logger, logs := newLogRecorder()
	sw, err := NewSweeper(e.chk, pub, SweeperConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: logger}, Group: testbed.Name(t, "sweep"),
		ProducerGroups:  []string{e.group},
		RetryDelayLevel: 1,
	})
	require.NoError(t, err)
	require.NoError(t, sw.Start(context.Background()))
	t.Cleanup(func() { _ = sw.Close(context.Background()) })
	return logs
}

// With no producer of the group left, the half messages of a killed
// producer are discarded by both brokers into TRANS_CHECK_MAX_TIME_TOPIC;
// one sweeper consumes that topic from both and republishes every
// committed event once.
func TestClusterSweeperSweepsBothBrokers(t *testing.T) {
	brokers := testbed.RequireCluster(t)
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	logs := startGroupSweeper(t, e, newTestPublisher(t, 0))

	prefix := "swept-" + testbed.Suffix()
	runClusterChild(t, e, prefix, 16)
	for i := 0; i < 16; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		require.Equal(t, checker.StateCommitted, e.barrier(t, id))
		require.Eventually(t, func() bool { return obs.Count(id) > 0 }, 3*time.Minute, 100*time.Millisecond,
			"%s was not republished; logs:\n%s", id, logs)
		obs.DeliveredOnce(t, id)
	}
	for _, b := range brokers {
		require.Positive(t, logs.countLines("republished it", "broker="+b.Name),
			"nothing discarded by %s was swept; logs:\n%s", b.Name, logs)
	}
}

package txrmq

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// What per-key order transactional mode keeps. The broker appends a
// transactional message to its queue when END_TRANSACTION (or a
// check-back) commits it, not when its half message arrives; these tests
// pin down what follows for a sharding key.

// keyEvent is the event of the order tests.
type keyEvent struct {
	N int `json:"n"`
}

// keyMessage is event n of key.
func keyMessage(t *testing.T, topic, key string, n int) *txmsg.Message {
	body, err := json.Marshal(keyEvent{N: n})
	require.NoError(t, err)
	return &txmsg.Message{ID: txmsg.NewID(), Topic: topic, ShardingKey: key, Body: body}
}

// handledKeys starts an ordered consumer of e's topic and returns a func
// reporting the events it handled, in handling order.
func handledKeys(t *testing.T, e *txEnv) func() []int {
	t.Helper()
	inbox, err := txmsg.NewInbox(e.db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(context.Background()))
	var mu sync.Mutex
	var order []int
	c, err := NewOrderedConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[keyEvent]{Name: e.topic}, func(_ context.Context, _ *gorm.DB, d txmsg.Delivery[keyEvent]) error {
		mu.Lock()
		order = append(order, d.Event.N)
		mu.Unlock()
		return nil
	})}, OrderedConsumerConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "ocg"),
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), order...)
	}
}

// storedOffsets waits until obs has seen every id and returns each one's
// queue and offset.
func storedOffsets(t *testing.T, obs *testbed.Observer, ids ...string) (queue int, offsets []int64) {
	t.Helper()
	queue = -1
	for _, id := range ids {
		obs.Delivered(t, id)
		m := obs.First(id)
		if queue == -1 {
			queue = m.Queue.QueueId
		}
		require.Equal(t, queue, m.Queue.QueueId, "one key, one queue")
		offsets = append(offsets, m.QueueOffset)
	}
	return queue, offsets
}

// One producer sends a key's transactions one after another (each
// Transact returns before the next begins). What holds: every event of the
// key is on one queue, and an ordered consumer handles them in the order
// the broker stored them. What does not: stored order is send order. The
// client sends END_TRANSACTION one-way and the broker handles those
// requests on a thread pool, so two commits sent a moment apart can land
// in either order; the test logs how many did.
func TestTransactionalKeyOneSenderStoredOrder(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	handled := handledKeys(t, e)
	tr := e.start(t, e.db, e.chk, nil)
	const n = 100
	var ids []string
	for i := 1; i <= n; i++ {
		m := keyMessage(t, e.topic, "account-1", i)
		r, err := tr.Transact(context.Background(), m, createOrder(fmt.Sprint(i)))
		require.NoError(t, err)
		require.Equal(t, txmsg.StateCommitted, r.State)
		ids = append(ids, m.ID)
	}
	_, offsets := storedOffsets(t, obs, ids...)
	byOffset := make([]int, n)
	for i := range byOffset {
		byOffset[i] = i + 1
	}
	sort.Slice(byOffset, func(a, b int) bool { return offsets[byOffset[a]-1] < offsets[byOffset[b]-1] })
	inversions := 0
	for i := 1; i < n; i++ {
		if byOffset[i] < byOffset[i-1] {
			inversions++
		}
	}
	t.Logf("%d of %d sequentially sent events stored before an event sent earlier", inversions, n)
	require.Eventually(t, func() bool { return len(handled()) >= n }, consumerTestWait, 50*time.Millisecond)
	require.Equal(t, byOffset, handled(), "handled in stored order")
}

const consumerTestWait = 60 * time.Second

// Two transactions of one key in flight at once: the first to send its
// half message commits last, and the broker stores (and an ordered
// consumer handles) it last. Order is END_TRANSACTION order, not send
// order.
func TestTransactionalKeyOrderIsCommitOrder(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	handled := handledKeys(t, e)
	tr := e.start(t, e.db, e.chk, nil)

	first := keyMessage(t, e.topic, "account-1", 1)
	second := keyMessage(t, e.topic, "account-1", 2)
	inLocal, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		// The half message is stored before the local transaction runs.
		_, err := tr.Transact(context.Background(), first, func(ctx context.Context, tx *gorm.DB) error {
			close(inLocal)
			<-release
			return createOrder("first")(ctx, tx)
		})
		done <- err
	}()
	<-inLocal
	_, err := tr.Transact(context.Background(), second, createOrder("second"))
	require.NoError(t, err)
	obs.Delivered(t, second.ID)
	close(release)
	require.NoError(t, <-done)

	_, offsets := storedOffsets(t, obs, second.ID, first.ID)
	require.Less(t, offsets[0], offsets[1], "the event committed first is stored first, though its half message was sent second")
	require.Eventually(t, func() bool { return len(handled()) >= 2 }, consumerTestWait, 50*time.Millisecond)
	require.Equal(t, []int{2, 1}, handled())
}

// orderChildEnv names the environment of TestTransactionalKeyOrderChild.
const orderChildEnv = "TXMSG_TXORDER_CHILD"

// TestTransactionalKeyOrderChild is not a test of its own: it runs as a
// producer that sends event 1 of a key and is killed after its local
// commit, before END_TRANSACTION.
func TestTransactionalKeyOrderChild(t *testing.T) {
	spec := os.Getenv(orderChildEnv)
	if spec == "" {
		t.Skip("runs only as a child of TestTransactionalKeyOrderLostEndTransaction")
	}
	parts := strings.Split(spec, "|")
	require.Len(t, parts, 5)
	dsn, topic, group, id, key := parts[0], parts[1], parts[2], parts[3], parts[4]
	db, err := testbed.Open(dsn)
	require.NoError(t, err)
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	hook := pointHook{afterLocal: func(_ *txmsg.Message, state txmsg.LocalState) {
		if state == txmsg.StateCommitted {
			fmt.Println("KILL-POINT after-local-commit")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}}
	tr, err := NewTransactional(db, chk, TransactionalConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: group, Hooks: txmsg.Hooks{hook},
		Topics: []string{topic},
	})
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	m := keyMessage(t, topic, key, 1)
	m.ID = id
	_, err = tr.Transact(context.Background(), m, createOrder("child"))
	t.Fatalf("the child should have been killed after its local commit, Transact returned %v", err)
}

// A producer dies after event 1's local commit, before END_TRANSACTION;
// the key's next event, sent afterwards by another producer, commits at
// once. Event 1 is committed by a check-back later and stored after event
// 2: a lost END_TRANSACTION (a crash, a lost packet) breaks the key's
// order, however carefully the producers take turns.
//
// Event 2 goes through a producer of another group, and a producer of
// event 1's group starts only once event 2 is stored: the broker sends
// check-backs to a live producer of the half message's group, so event
// 1 cannot commit earlier, whatever the broker's check interval.
func TestTransactionalKeyOrderLostEndTransaction(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	handled := handledKeys(t, e)

	id1 := txmsg.NewID()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTransactionalKeyOrderChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), orderChildEnv+"="+strings.Join([]string{e.dsn, e.topic, e.group, id1, "account-1"}, "|"))
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "KILL-POINT after-local-commit", "child output:\n%s", out)
	require.Equal(t, checker.StateCommitted, e.barrier(t, id1), "event 1 committed in the database")

	cfg := e.config(nil)
	cfg.Group = testbed.Name(t, "txp2")
	other, err := NewTransactional(e.db, e.chk, cfg)
	require.NoError(t, err)
	require.NoError(t, other.Start(context.Background()))
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	second := keyMessage(t, e.topic, "account-1", 2)
	_, err = other.Transact(context.Background(), second, createOrder("second"))
	require.NoError(t, err)
	obs.Delivered(t, second.ID)
	require.Zero(t, obs.Count(id1), "event 1 waits for a check-back")

	e.start(t, e.db, e.chk, nil) // answers event 1's check-back: COMMIT
	_, offsets := storedOffsets(t, obs, second.ID, id1)
	require.Less(t, offsets[0], offsets[1], "event 1, committed by a check-back, is stored after event 2")
	require.Eventually(t, func() bool { return len(handled()) >= 2 }, consumerTestWait, 50*time.Millisecond)
	require.Equal(t, []int{2, 1}, handled(), "an ordered consumer handles them in stored order")
}

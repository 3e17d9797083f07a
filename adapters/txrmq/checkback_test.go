package txrmq

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// blockedCheckBacks counts the client's goroutines that received a
// check-back from a broker and wait to hand it to a producer: blocked in a
// channel send in the client's request handler itself (runtime.Stack omits
// the runtime's frames, so that handler is the top frame).
func blockedCheckBacks() int {
	n := 0
	for _, g := range goroutineStacks() {
		lines := strings.SplitN(g, "\n", 3)
		if len(lines) >= 2 && strings.Contains(lines[0], "[chan send") &&
			strings.Contains(lines[1], "internal.GetOrNewRocketMQClient.func") {
			n++
		}
	}
	return n
}

// blockedHeaders lists the first line of each blocked check-back
// goroutine (its state and how long it has waited), for failure messages.
func blockedHeaders() []string {
	var out []string
	for _, g := range goroutineStacks() {
		lines := strings.SplitN(g, "\n", 3)
		if len(lines) >= 2 && strings.Contains(lines[0], "[chan send") &&
			strings.Contains(lines[1], "internal.GetOrNewRocketMQClient.func") {
			out = append(out, lines[0])
		}
	}
	return out
}

// goroutineStacks returns the stack of every goroutine, by goroutine ID.
func goroutineStacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, " [")
		out[head] = g
	}
	return out
}

// The producer of a committed transaction died before END_TRANSACTION, and
// the only live producer left in its group is a Publisher (a relay's, say,
// during a switch to local-table mode). With a Checker, the Publisher
// answers the check-back from the barrier and the event is delivered.
func TestPublisherWithCheckerAnswersCheckBacks(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	pub, err := NewPublisher(PublisherConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: e.group,
		Topics:  []string{e.topic},
		Checker: e.chk,
	})
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	id := txmsg.NewID()
	runChild(t, e, "after-local-commit", id)
	require.Equal(t, checker.StateCommitted, e.barrier(t, id))
	obs.DeliveredOnce(t, id)
	// The publisher still publishes.
	plain := &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}
	require.NoError(t, pub.Publish(context.Background(), plain))
	obs.Delivered(t, plain.ID)
}

// Without a Checker, a check-back that reaches a Publisher is answered
// UNKNOWN at once, with a warning, and leaves no client goroutine behind.
func TestPublisherWithoutCheckerAnswersUnknown(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	logger, logs := newLogRecorder()
	pub, err := NewPublisher(PublisherConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: logger}, Group: e.group,
		Topics: []string{e.topic},
	})
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	id := txmsg.NewID()
	runChild(t, e, "after-local-commit", id)
	require.Eventually(t, func() bool { return logs.countLines("level=WARN", "without a Checker", id) >= 2 }, 60*time.Second, 50*time.Millisecond,
		"no check-back was answered; logs:\n%s", logs)
	// The count is process-wide: other tests' check-back bursts show
	// briefly, so it is enough that it drops to zero once.
	require.Eventually(t, func() bool { return blockedCheckBacks() == 0 }, time.Minute, 5*time.Millisecond,
		"check-backs are left blocked in the client: %s", blockedHeaders())
	require.Equal(t, checker.StateCommitted, e.barrier(t, id))
}

// unknownListener answers nothing: its half messages stay pending.
type unknownListener struct{}

func (unknownListener) ExecuteLocalTransaction(*primitive.Message) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

func (unknownListener) CheckLocalTransaction(*primitive.MessageExt) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

// orphanHalfMessages stores one half message per ID in e's group and leaves
// them unanswered, as producers that died after the half send would.
func orphanHalfMessages(t *testing.T, e *txEnv, ids []string) {
	t.Helper()
	tp, err := rmq.NewTransactionProducer(unknownListener{},
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{testbed.NameServer()})),
		producer.WithGroupName(e.group),
		producer.WithInstanceName("orphans-"+testbed.Suffix()))
	require.NoError(t, err)
	require.NoError(t, tp.Start())
	for _, id := range ids {
		m := primitive.NewMessage(e.topic, []byte(`{}`))
		m.WithProperty(txmsg.PropertyID, id)
		res, err := tp.SendMessageInTransaction(context.Background(), m)
		require.NoError(t, err)
		require.Equal(t, primitive.SendOK, res.Status)
	}
	require.NoError(t, tp.Shutdown())
}

// checkBackCounter counts CheckBack hook calls.
type checkBackCounter struct{ n atomic.Int64 }

func (c *checkBackCounter) OnCheckBack(string, string, string, txmsg.LocalState, error, time.Duration) {
	c.n.Add(1)
}

// Check-backs keep coming while every answer waits on the database. They
// must not pile up as goroutines: a few are resolved at a time, a bounded
// number wait, and the rest are answered UNKNOWN at once.
func TestCheckBacksDoNotPileUpWhileTheDatabaseIsSlow(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "a load test of the check-back goroutines, which no collation or isolation level changes")
	e := newTxEnv(t)
	ctx := context.Background()
	const n = 200
	ids := make([]string, n)
	// An open transaction holds a barrier row for each ID: every check-back
	// waits for its lock, until the checker session's 1 s lock timeout.
	holder := e.db.Begin()
	require.NoError(t, holder.Error)
	t.Cleanup(func() { holder.Rollback() })
	for i := range ids {
		ids[i] = txmsg.NewID()
		require.NoError(t, e.chk.Begin(ctx, holder, ids[i]))
	}
	orphanHalfMessages(t, e, ids)

	cfg, err := mysql.ParseDSN(e.dsn)
	require.NoError(t, err)
	cfg.Params["innodb_lock_wait_timeout"] = "1"
	slow, err := testbed.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := slow.DB(); err == nil {
			_ = s.Close()
		}
	})
	chk, err := checker.New(slow, checker.Config{ResolveTimeout: 10 * time.Second})
	require.NoError(t, err)

	counter := &checkBackCounter{}
	tcfg := e.config(nil)
	tcfg.Hooks = txmsg.Hooks{counter}
	tcfg.CheckBackWorkers, tcfg.CheckBackQueue = 2, 16
	tr, err := NewTransactional(e.db, chk, tcfg)
	require.NoError(t, err)
	require.NoError(t, tr.Start(ctx))
	t.Cleanup(func() { _ = tr.Close(ctx) })

	// The broker sends each pass of check-backs as a burst, one client
	// goroutine each, so a burst is briefly visible as blocked goroutines
	// even while the reader drains it, the more so on a loaded machine.
	// What must not happen is that they stay blocked: before the fix every
	// check-back waited for the one before it to be resolved, so nearly
	// all of them were blocked in every sample. Once the hooks have seen
	// the first pass, most samples must show at most bound blocked.
	const bound = 50
	var mu sync.Mutex
	var samples, piled int
	require.Eventually(t, func() bool {
		b := blockedCheckBacks()
		mu.Lock()
		defer mu.Unlock()
		if counter.n.Load() >= n/2 {
			samples++
			if b > bound {
				piled++
			}
		}
		return counter.n.Load() >= 2*n && samples >= 20
	}, 3*time.Minute, 20*time.Millisecond, "only %d check-backs were answered", counter.n.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Less(t, piled*2, samples, "check-backs piled up in the client while the database was slow: more than %d blocked in %d of %d samples", bound, piled, samples)
}

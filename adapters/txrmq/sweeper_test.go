package txrmq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// The database is unreachable for the check-back answerer for longer than
// the broker's whole check window, so the broker gives up on both half
// messages. While the database stays unreachable past HoldFor, the sweeper
// holds both instead of handing them back (each hand-back would count
// toward the group's %DLQ%). After the database returns, the sweeper
// publishes the committed one exactly once and never the rolled-back one.
func TestSweeperRecoversPastTheCheckWindow(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)

	proxy, cutChk := e.cuttableChecker(t)

	logger, logs := newLogRecorder()
	e.start(t, e.db, cutChk, logger)
	pub := newTestPublisher(t, 0)
	sw, err := NewSweeper(cutChk, pub, SweeperConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: logger}, Group: testbed.Name(t, "sweep"),
		ProducerGroups:  []string{e.group},
		HoldFor:         3 * time.Second,
		RetryDelayLevel: 1,
	})
	require.NoError(t, err)
	require.NoError(t, sw.Start(context.Background()))
	t.Cleanup(func() { _ = sw.Close(context.Background()) })

	proxy.Cut()
	committed, abandoned := txmsg.NewID(), txmsg.NewID()
	runChild(t, e, "after-local-commit", committed)
	runChild(t, e, "after-half-send", abandoned)
	require.Equal(t, checker.StateCommitted, e.barrier(t, committed))
	require.Empty(t, e.barrier(t, abandoned))

	// Both half messages outlive the check window and reach the sweeper,
	// which cannot resolve them yet.
	require.Eventually(t, func() bool {
		return logs.countLines("barrier unreachable", committed) > 0 && logs.countLines("barrier unreachable", abandoned) > 0
	}, 90*time.Second, 100*time.Millisecond, "the broker did not discard the half messages; logs:\n%s", logs)
	require.Zero(t, obs.Count(committed))
	require.Eventually(t, func() bool {
		return logs.countLines("holding the discarded half message past HoldFor", committed) > 0 &&
			logs.countLines("holding the discarded half message past HoldFor", abandoned) > 0
	}, 30*time.Second, 100*time.Millisecond, "the sweeper did not hold past HoldFor; logs:\n%s", logs)
	require.Zero(t, logs.countLines("handing the discarded half message back"), "handed back while the database was down")

	proxy.Restore()
	require.Eventually(t, func() bool { return obs.Count(committed) > 0 }, 60*time.Second, 50*time.Millisecond,
		"the committed event was not republished; logs:\n%s", logs)
	obs.DeliveredOnce(t, committed)
	require.Eventually(t, func() bool { return logs.countLines("rolled back; dropping", abandoned) > 0 }, 60*time.Second, 100*time.Millisecond)
	require.Equal(t, checker.StateRolledBack, e.barrier(t, abandoned))
	require.Zero(t, obs.Count(abandoned))
	got := obs.First(committed)
	require.Equal(t, e.topic, got.Topic)
	require.Equal(t, `{"from":"child"}`, string(got.Body))
}

type checkBackHook struct{}

func (checkBackHook) OnCheckBack(string, string, string, txmsg.LocalState, error, time.Duration) {}

func TestSweeperConfigValidation(t *testing.T) {
	t.Parallel()
	chk, err := checker.New(&gorm.DB{}, checker.Config{})
	require.NoError(t, err)
	conn := Conn{NameServers: []string{"127.0.0.1:9876"}}
	_, err = NewSweeper(chk, &Publisher{}, SweeperConfig{Conn: conn, Group: "sweeper"})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "no producer groups")
	_, err = NewSweeper(chk, &Publisher{}, SweeperConfig{Conn: conn, Group: "sweeper", ProducerGroups: []string{"bad group"}})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	_, err = NewSweeper(nil, &Publisher{}, SweeperConfig{Conn: conn, Group: "sweeper", ProducerGroups: []string{"g"}})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	// Hooks are taken (a sweeper calls OnHeld, a publisher OnCheckBack),
	// but a value that implements no hook is refused.
	notAHook := txmsg.Hooks{struct{}{}}
	_, err = NewSweeper(chk, &Publisher{}, SweeperConfig{Conn: conn, Group: "sweeper", Hooks: notAHook, ProducerGroups: []string{"g"}})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "implements none of txmsg's hook interfaces")
	_, err = NewPublisher(PublisherConfig{Conn: conn, Group: "sweeper", Hooks: notAHook})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "implements none of txmsg's hook interfaces")
	sw, err := NewSweeper(chk, &Publisher{}, SweeperConfig{Conn: conn, Group: "sweeper", Hooks: txmsg.Hooks{checkBackHook{}}, ProducerGroups: []string{"g"}})
	require.NoError(t, err)
	require.NoError(t, sw.Close(context.Background()))
}

// heldHook records HookHeld calls.
type heldHook struct {
	mu   sync.Mutex
	held map[string]error
}

func (h *heldHook) OnHeld(_ string, txID, _ string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[string]error{}
	}
	h.held[txID] = err
}

func (h *heldHook) get(id string) (error, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	err, ok := h.held[id]
	return err, ok
}

// A committed transaction's half message reaches the sweeper after its
// barrier row was purged. A missing row then proves nothing: the sweeper
// must not drop the event as rolled back, but keep it for an operator,
// parked in the inbox's parked table, with an error log and a hook call.
func TestSweeperKeepsHalfMessagesBeyondThePurgeHorizon(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	inbox, err := txmsg.NewInbox(e.db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(context.Background()))

	// Check-backs cannot reach the database, so the broker discards the
	// half message after its check window.
	proxy, cutChk := e.cuttableChecker(t)
	e.start(t, e.db, cutChk, nil)
	proxy.Cut()
	committed := txmsg.NewID()
	runChild(t, e, "after-local-commit", committed)
	require.Equal(t, checker.StateCommitted, e.barrier(t, committed))

	// Retention runs with a short window and deletes the row.
	purger, err := checker.New(e.db, checker.Config{CheckWindow: time.Second})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := purger.Purge(context.Background(), time.Second, 0)
		require.NoError(t, err)
		return n == 1
	}, 30*time.Second, 200*time.Millisecond)

	logger, logs := newLogRecorder()
	hook := &heldHook{}
	group := testbed.Name(t, "sweep")
	sw, err := NewSweeper(e.chk, newTestPublisher(t, 0), SweeperConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: logger}, Group: group, Hooks: txmsg.Hooks{hook},
		ProducerGroups:  []string{e.group},
		HoldFor:         time.Second,
		RetryDelayLevel: 1,
	})
	require.NoError(t, err)
	require.NoError(t, sw.Start(context.Background()))
	t.Cleanup(func() { _ = sw.Close(context.Background()) })

	require.Eventually(t, func() bool {
		_, ok := hook.get(committed)
		return ok || logs.countLines("rolled back; dropping", committed) > 0
	}, 120*time.Second, 100*time.Millisecond, "the broker did not discard the half message; logs:\n%s", logs)
	require.Zero(t, logs.countLines("rolled back; dropping", committed), "a possibly committed event was dropped as rolled back")
	herr, ok := hook.get(committed)
	require.True(t, ok)
	require.ErrorIs(t, herr, checker.ErrBeyondPurgeHorizon)
	// The hook fires first; the error line and the parked row follow.
	var parked []txmsg.ParkedRow
	require.Eventually(t, func() bool {
		parked = nil
		return e.db.Table(txmsg.DefaultParkedTable).Where("msg_id = ?", committed).Find(&parked).Error == nil &&
			len(parked) > 0 && logs.countLines("level=ERROR", "purge horizon", committed) > 0
	}, 30*time.Second, 50*time.Millisecond, "the held message was not parked and logged; logs:\n%s", logs)
	require.Equal(t, 1, logs.countLines("level=ERROR", "purge horizon", committed))
	require.Len(t, parked, 1)
	require.Equal(t, group, parked[0].ConsumerGroup)
	require.Equal(t, e.topic, parked[0].Topic)
	require.Equal(t, `{"from":"child"}`, string(parked[0].Body))
	require.Contains(t, parked[0].Error, "purge horizon")
	require.Empty(t, e.barrier(t, committed), "no rolled_back row may be written for it")
	require.Zero(t, obs.Count(committed))
}

// sweepSpy is the sweeper's publisher in TestBrokerRestartSweeperPullsAgainAtOnce:
// when the sweeper publishes the event it waits for, it records which of
// the sweeper client's requests are still pending.
type sweepSpy struct {
	txmsg.Publisher
	pending func() ([]int32, error)

	mu      sync.Mutex
	waitFor string
	got     chan []int32
	seen    map[string]bool
}

func (p *sweepSpy) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		if p.seen[m.ID] {
			continue
		}
		p.seen[m.ID] = true
		if m.ID == p.waitFor {
			pending, err := p.pending()
			if err != nil {
				pending = nil
			}
			p.got <- pending
		}
	}
	p.mu.Unlock()
	return p.Publisher.Publish(ctx, msgs...)
}

func (p *sweepSpy) expect(id string) chan []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waitFor, p.got = id, make(chan []int32, 1)
	return p.got
}

// After its broker is SIGKILLed and started again, the sweeper's queue of
// CheckMaxTimeTopic is re-created at the broker's return, and a half
// message the broker discarded after the restart is republished while the
// pull sent before the kill still waits for its answer. Left alone, the
// client pulls again when the lost pull times out (30 s after it was sent,
// and 3 s more) or earlier when it re-creates the queue on its own (it did
// 12–17 s after the kill in three runs), so the wait depends on its
// timers; what fails there is the count of queues re-created.
//
// It needs a broker of its own (testbed.BrokerRestartEnv) and takes about
// 30 s.
func TestBrokerRestartSweeperPullsAgainAtOnce(t *testing.T) {
	testbed.RequireRestartableBroker(t)
	e := newTxEnv(t)
	// Check-backs cannot reach the database, so the broker discards the
	// half messages; the sweeper reads the barrier directly.
	proxy, cutChk := e.cuttableChecker(t)
	e.start(t, e.db, cutChk, nil)
	proxy.Cut()

	spy := &sweepSpy{Publisher: newTestPublisher(t, 0), seen: map[string]bool{}}
	sw, err := NewSweeper(e.chk, spy, SweeperConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "sweep"),
		ProducerGroups:  []string{e.group},
		HoldFor:         3 * time.Second,
		RetryDelayLevel: 1,
	})
	require.NoError(t, err)
	require.NoError(t, sw.Start(context.Background()))
	t.Cleanup(func() { _ = sw.Close(context.Background()) })
	clientPending := func() ([]int32, error) {
		sw.mu.Lock()
		pc := sw.pc
		sw.mu.Unlock()
		if pc == nil {
			return nil, errors.New("the sweeper's consumer has not started")
		}
		return clientinternals.PendingRequests(pc)
	}
	spy.pending = clientPending

	before := txmsg.NewID()
	swept := spy.expect(before)
	runChild(t, e, "after-local-commit", before)
	select {
	case <-swept:
	case <-time.After(2 * time.Minute):
		t.Fatal("the half message discarded before the kill was not swept")
	}
	// The pull that follows the one which brought it is now held by the
	// broker; a new half message waits for its check-backs.
	time.Sleep(time.Second)
	after := txmsg.NewID()
	runChild(t, e, "after-local-commit", after)

	testbed.KillBroker(t)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			testbed.StartBroker(t)
		}
	})
	lost, err := clientPending()
	require.NoError(t, err)
	require.NotEmpty(t, lost, "no pull was in flight when the broker died")
	lostAtKill := map[int32]bool{}
	for _, o := range lost {
		lostAtKill[o] = true
	}
	swept = spy.expect(after)
	testbed.StartBroker(t)
	restarted = true

	var stillLost []int32
	select {
	case pending := <-swept:
		for _, o := range pending {
			if lostAtKill[o] {
				stillLost = append(stillLost, o)
			}
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the half message discarded after the restart was not swept")
	}
	t.Logf("requests in flight at the kill: %v; queues re-created: %d; still waiting when the sweeper republished: %v",
		lost, sw.expired.Load(), stillLost)
	require.NotEmpty(t, stillLost,
		"the sweeper republished only once every pull lost with the broker had returned")
	require.Positive(t, sw.expired.Load())
}

// The broker discards the half message of a committed transaction, and the
// sweeper's republish fails because the route to the event's topic is
// unavailable: its publisher reaches no name server (a proxy the test
// cuts), so it learns no route to the topic. The sweeper holds the half
// message past HoldFor instead of handing it back to the broker (each
// hand-back counts toward the sweeper group's redeliveries, 16, then
// %DLQ%<group>, which nothing reads), and republishes it once the route
// is back.
func TestSweeperHoldsWhileTheBrokerIsAway(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	// Check-backs cannot reach the database, so the broker discards the
	// half message; the sweeper reads the barrier directly.
	proxy, cutChk := e.cuttableChecker(t)
	e.start(t, e.db, cutChk, nil)
	proxy.Cut()

	ns := testbed.NewProxy(t, testbed.NameServer())
	ns.Cut()
	pub, err := NewPublisher(PublisherConfig{Conn: Conn{NameServers: []string{ns.Addr()}}, Group: testbed.Name(t, "pub")})
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	logger, logs := newLogRecorder()
	sw, err := NewSweeper(e.chk, pub, SweeperConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: logger}, Group: testbed.Name(t, "sweep"),
		ProducerGroups:  []string{e.group},
		HoldFor:         2 * time.Second,
		RetryDelayLevel: 1,
	})
	require.NoError(t, err)
	require.NoError(t, sw.Start(context.Background()))
	t.Cleanup(func() { _ = sw.Close(context.Background()) })

	committed := txmsg.NewID()
	runChild(t, e, "after-local-commit", committed)
	require.Equal(t, checker.StateCommitted, e.barrier(t, committed))

	require.Eventually(t, func() bool { return logs.countLines("republishing failed", committed) > 0 }, 2*time.Minute, 100*time.Millisecond,
		"the sweeper did not try to republish the discarded half message; logs:\n%s", logs)
	const handedBack = "handing the discarded half message back"
	const holding = "the broker does not take the republished event"
	require.Eventually(t, func() bool {
		return logs.countLines(holding, committed) > 0 || logs.countLines(handedBack, committed) > 0
	}, time.Minute, 100*time.Millisecond, "neither held nor handed back past HoldFor; logs:\n%s", logs)
	require.Zero(t, logs.countLines(handedBack, committed), "handed back while the route was unavailable; logs:\n%s", logs)
	// It goes on trying while it holds.
	failed := logs.countLines("republishing failed", committed)
	require.Eventually(t, func() bool { return logs.countLines("republishing failed", committed) >= failed+2 }, time.Minute, 100*time.Millisecond,
		"the sweeper stopped retrying; logs:\n%s", logs)
	require.Zero(t, logs.countLines(handedBack, committed), "handed back while the route was unavailable; logs:\n%s", logs)
	require.Zero(t, obs.Count(committed))

	ns.Restore()
	require.Eventually(t, func() bool { return obs.Count(committed) > 0 }, time.Minute, 50*time.Millisecond,
		"the committed event was not republished once the route was back; logs:\n%s", logs)
	obs.DeliveredOnce(t, committed)
	require.Equal(t, 1, logs.countLines("republished it", committed))
	require.Zero(t, logs.countLines(handedBack, committed))
}

// TestSweeperStartedBeforeItsTopicExists: a sweeper started before any
// broker has discarded a half message (TRANS_CHECK_MAX_TIME_TOPIC does
// not exist yet, as on a new cluster) looks for the topic in the
// background. It once took the name servers' "missing" for a started
// consumer and never swept. A namespace of its own makes the topic
// missing here.
func TestSweeperStartedBeforeItsTopicExists(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	logger, logs := newLogRecorder()
	sw, err := NewSweeper(e.chk, newTestPublisher(t, 0), SweeperConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}, Namespace: "ns" + testbed.Suffix(), Logger: logger}, Group: testbed.Name(t, "sweep"),
		ProducerGroups: []string{e.group},
	})
	require.NoError(t, err)
	require.NoError(t, sw.Start(context.Background()))
	t.Cleanup(func() { _ = sw.Close(context.Background()) })
	require.Positive(t, logs.countLines("looking for it in the background"), "logs:\n%s", logs)
	require.Zero(t, logs.countLines("cannot watch brokers"), "logs:\n%s", logs)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	require.Nil(t, sw.pc, "a consumer was taken as started")
}

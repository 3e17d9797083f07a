package txrmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/rmqwire"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
	"github.com/txmsg/txmsg/txmsg"
)

// The tests of this file run on the HA form of the test bed (make
// test-ha: two groups of a master and a slave, asynchronous or synchronous
// replication) and skip without it. They SIGKILL its brokers: never
// parallel.

// haEffect is one handling of an event by the inbox: written in the
// handler's transaction, so the rows per MsgID count the handlings that
// committed.
type haEffect struct {
	ID    int64  `gorm:"primaryKey;autoIncrement"`
	MsgID string `gorm:"size:64;index"`
}

// haOrder is the business row of a transaction whose txmsg ID is MsgID.
func haOrder(id string) txmsg.LocalTx {
	return func(_ context.Context, tx *gorm.DB) error {
		return tx.Create(&order{MsgID: id, SKU: id}).Error
	}
}

// errHAAbort rolls a local transaction back on purpose.
var errHAAbort = errors.New("rolled back on purpose")

// haInbox is an inbox consumer of the env's topic whose handler writes a
// haEffect, held at gate until open is called.
type haInbox struct {
	db   *gorm.DB
	gate chan struct{}
	once sync.Once
	mu   sync.Mutex
	at   map[string]time.Time // when each event was first handled
}

func (h *haInbox) open() { h.once.Do(func() { close(h.gate) }) }

func (h *haInbox) handledAt(id string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.at[id]
	return at, ok
}

// effects returns the committed handlings per txmsg ID.
// waitHandled waits up to within until every one of ids was handled and
// returns how many were not.
func (h *haInbox) waitHandled(ids []string, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		notYet := 0
		for _, id := range ids {
			if _, ok := h.handledAt(id); !ok {
				notYet++
			}
		}
		if notYet == 0 || time.Now().After(deadline) {
			return notYet
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (h *haInbox) effects(t *testing.T) map[string]int {
	t.Helper()
	var rows []haEffect
	require.NoError(t, h.db.Find(&rows).Error)
	out := map[string]int{}
	for _, r := range rows {
		out[r.MsgID]++
	}
	return out
}

// rawCodec passes bodies through as strings: the events of these tests
// are their txmsg IDs (the child producer of cluster_test.go sends them
// raw).
type rawCodec struct{}

func (rawCodec) Encode(v string) ([]byte, error)    { return []byte(v), nil }
func (rawCodec) Decode(body []byte) (string, error) { return string(body), nil }

// startHASweeper runs the sweeper of e's producer group and returns its
// log. A restarted master checks its half messages back from its first
// seconds, before producers' heartbeats reach it (the name server routed
// to a restarted master of this test bed only 13–14 s after its start in
// CI runs, and producers learn its address from the routes): each
// check that finds no producer channel counts toward transactionCheckMax,
// 5 checks 1 s apart here, so the master may discard half messages whose
// END_TRANSACTION it never got into TRANS_CHECK_MAX_TIME_TOPIC. The
// sweeper republishes the committed ones, as it must in production
// wherever the check window is shorter than a broker restart.
func startHASweeper(t *testing.T, e *txEnv) *logRecorder {
	t.Helper()
	return startGroupSweeper(t, e, haPublisher(t, "swpub"))
}

// startHAInbox starts an inbox consumer that pulls little ahead
// (BufferMessages 8: about one pull batch per queue), so that while its
// handler is held most of the topic stays on the brokers.
func startHAInbox(t *testing.T, e *txEnv) *haInbox {
	t.Helper()
	return startHAInboxOn(t, e, testbed.NameServer())
}

// startHAInboxOn is startHAInbox with the consumer on the name server at
// nameServer.
func startHAInboxOn(t *testing.T, e *txEnv, nameServer string) *haInbox {
	t.Helper()
	h := &haInbox{db: e.db, gate: make(chan struct{}), at: map[string]time.Time{}}
	t.Cleanup(h.open)
	require.NoError(t, e.db.AutoMigrate(&haEffect{}))
	inbox, err := txmsg.NewInbox(e.db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(context.Background()))
	route := txmsg.Handle(txmsg.Topic[string]{Name: e.topic, Codec: rawCodec{}}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[string]) error {
		select {
		case <-h.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := tx.Create(&haEffect{MsgID: d.Message.ID}).Error; err != nil {
			return err
		}
		h.mu.Lock()
		if _, ok := h.at[d.Message.ID]; !ok {
			h.at[d.Message.ID] = time.Now()
		}
		h.mu.Unlock()
		return nil
	})
	c, err := NewConsumer(inbox, []txmsg.Route{route}, ConsumerConfig{
		Conn: Conn{NameServers: []string{nameServer}}, Group: testbed.Name(t, "inbox"),
		RetryDelayLevel: 1, Concurrency: 4, BufferMessages: 8,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return h
}

// haLoad runs transactions (every fifth rolled back on purpose) and
// publishes from workers until stop, recording each outcome and the time.
type haLoad struct {
	mu         sync.Mutex
	committed  map[string]time.Time // txmsg ID -> when Transact returned
	rolledBack []string             // rolled back on purpose
	failed     []string             // Transact returned another error
	failErrs   map[string]int       // failures by error text
	published  map[string]time.Time
	pubFailed  int
	n          atomic.Int64
	stop       context.CancelFunc
	wg         sync.WaitGroup
}

func runHALoad(t *testing.T, e *txEnv, tr *Transactional, pub *Publisher, workers int) *haLoad {
	t.Helper()
	l := &haLoad{committed: map[string]time.Time{}, published: map[string]time.Time{}, failErrs: map[string]int{}}
	ctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("ha-%d-%d-%s", w, i, testbed.Suffix())
				body := []byte(id)
				local := haOrder(id)
				abort := i%5 == 4
				if abort {
					local = func(context.Context, *gorm.DB) error { return errHAAbort }
				}
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				rc, err := tr.Transact(cctx, &txmsg.Message{ID: id, Topic: e.topic, Body: body}, local)
				cancel()
				l.n.Add(1)
				l.mu.Lock()
				switch {
				case abort && errors.Is(err, errHAAbort):
					l.rolledBack = append(l.rolledBack, id)
				case err == nil && rc.State == txmsg.StateCommitted:
					l.committed[id] = time.Now()
				default:
					l.failed = append(l.failed, id)
					l.failErrs[haErrKind(err)]++
				}
				l.mu.Unlock()
				if w == 0 {
					pid := "pub-" + id
					pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err := pub.Publish(pctx, &txmsg.Message{ID: pid, Topic: e.topic, Body: []byte(pid)})
					cancel()
					l.mu.Lock()
					if err == nil {
						l.published[pid] = time.Now()
					} else {
						l.pubFailed++
					}
					l.mu.Unlock()
				}
			}
		}(w)
	}
	return l
}

// haErrKind names the kind of a failed transaction's error.
func haErrKind(err error) string {
	switch {
	case err == nil:
		return "no error, not committed"
	case errors.Is(err, txmsg.ErrRolledBackByCheck):
		return "ErrRolledBackByCheck"
	case errors.Is(err, txmsg.ErrUnavailable):
		for _, st := range []string{"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE", "FLUSH_DISK_TIMEOUT"} {
			if strings.Contains(err.Error(), st) {
				return "ErrUnavailable " + st
			}
		}
		return "ErrUnavailable"
	default:
		return err.Error()
	}
}

func (l *haLoad) halt() {
	l.stop()
	l.wg.Wait()
}

// committedSince counts the transactions that committed after at.
func (l *haLoad) committedSince(at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, when := range l.committed {
		if when.After(at) {
			n++
		}
	}
	return n
}

// checkOutcome asserts I1 and I2 on the load once every broker is back:
// every committed transaction's row exists and its event is handled
// exactly once, every successful publish is handled exactly once, and no
// rolled-back or failed transaction left a row or an event.
func checkOutcome(t *testing.T, e *txEnv, h *haInbox, l *haLoad, within time.Duration) {
	t.Helper()
	want := map[string]bool{}
	for id := range l.committed {
		want[id] = true
	}
	for id := range l.published {
		want[id] = true
	}
	var missing []string
	deadline := time.Now().Add(within)
	for {
		eff := h.effects(t)
		missing = missing[:0]
		for id := range want {
			if eff[id] == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events of committed transactions or successful publishes never handled within %s: %v", len(missing), within, missing)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // let a duplicate delivery, if any, be handled
	eff := h.effects(t)
	for id := range want {
		require.Equal(t, 1, eff[id], "%s handled %d times", id, eff[id])
	}
	for _, id := range append(append([]string{}, l.rolledBack...), l.failed...) {
		require.Zero(t, eff[id], "%s did not commit but its event was handled", id)
		var n int64
		require.NoError(t, e.db.Model(&order{}).Where("msg_id = ?", id).Count(&n).Error)
		require.Zero(t, n, "%s did not commit but its row exists", id)
		if s := e.barrier(t, id); s == checker.StateCommitted {
			t.Fatalf("%s did not commit but its barrier says committed", id)
		}
	}
	var rows int64
	require.NoError(t, e.db.Model(&order{}).Count(&rows).Error)
	require.EqualValues(t, len(l.committed), rows)
}

// A master is SIGKILLed under transactions and publishes, with a running
// inbox consumer held back so that most of the topic is still on the
// brokers: sends move to the other group; the consumer reads the dead
// master's queues from its slave (rocketmq-client-go pulls from any
// address of the broker name when the master's is gone), so every event
// stored on the dead master a second before the kill is handled while it
// is down; once it returns, every committed event and every publish that
// returned nil is handled exactly once, and nothing of the rolled-back or
// failed transactions is anywhere.
func TestHAMasterKill(t *testing.T) {
	ha := testbed.RequireHA(t)
	dead, other := ha.Masters[0].Name, ha.Masters[1].Name
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	h := startHAInbox(t, e)
	tr := e.start(t, e.db, e.chk, nil)
	pub := newTestPublisher(t, 0)

	l := runHALoad(t, e, tr, pub, 4)
	// Kill only once the observer has seen a committed event stored on
	// the master to be killed, and a moment more: a consumer's first
	// deliveries take some seconds after a broker restart of an earlier
	// test.
	require.Eventually(t, func() bool {
		if l.n.Load() < 300 {
			return false
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for id := range l.committed {
			if obs.Count(id) > 0 && obs.First(id).Queue.BrokerName == dead {
				return true
			}
		}
		return false
	}, 90*time.Second, 100*time.Millisecond, "the load did not start, or the observer saw nothing stored on %s", dead)
	time.Sleep(1500 * time.Millisecond)
	killedAt := time.Now()
	ha.Kill(t, dead)
	t.Cleanup(func() { ha.Restore(t) })
	l.mu.Lock()
	failedBefore := len(l.failed)
	l.mu.Unlock()
	require.Eventually(t, func() bool { return l.committedSince(killedAt) >= 40 }, 60*time.Second, 100*time.Millisecond,
		"transactions did not move to %s", other)
	l.halt()
	faultFailed := len(l.failed) - failedBefore
	t.Logf("%s replication, %s killed: %d transactions in all, %d committed (%d after the kill), %d rolled back on purpose, %d failed during the fault (%v); %d publishes, %d failed",
		ha.Replication, dead, l.n.Load(), len(l.committed), l.committedSince(killedAt), len(l.rolledBack), faultFailed, l.failErrs, len(l.published), l.pubFailed)

	// The dead master's events of more than a second before the kill
	// are on its slave: the held consumer, released now, reads them there.
	h.open()
	var onDead []string
	for id, at := range l.committed {
		if at.Before(killedAt.Add(-time.Second)) && obs.Count(id) > 0 && obs.First(id).Queue.BrokerName == dead {
			onDead = append(onDead, id)
		}
	}
	require.NotEmpty(t, onDead, "no committed event was stored on %s", dead)
	if notYet := h.waitHandled(onDead, 45*time.Second); notYet > 0 {
		t.Fatalf("%d of the %d events stored on %s a second or more before the kill were not handled while it was down: not read from %s",
			notYet, len(onDead), dead, ha.Slave(dead))
	}
	t.Logf("%d events stored on %s before the kill handled while it was down (read from %s), the last %s after the kill",
		len(onDead), dead, ha.Slave(dead), time.Since(killedAt).Round(time.Second))

	// Started only now: its start, with the load running, held back the
	// observer's first deliveries by more than the seconds before the
	// kill.
	sweeps := startHASweeper(t, e)
	restartAt := time.Now()
	ha.Start(t, dead)
	t.Logf("%s back after %s", dead, time.Since(restartAt).Round(time.Second))
	checkOutcome(t, e, h, l, 90*time.Second)
	t.Logf("%d half messages discarded by %s after its restart and republished by the sweeper", sweeps.countLines("republished it"), dead)
}

// Under synchronous replication (SYNC_MASTER, inSyncReplicas=2) the slave
// of broker-a is SIGKILLed under transactions and publishes: broker-a
// stores each message but answers FLUSH_SLAVE_TIMEOUT after slaveTimeout
// (3 s). For a half message rocketmq-client-go then rolls it back and
// never runs the local transaction; Transact returns an error wrapping
// txmsg.ErrUnavailable, nothing is written and no event is delivered. A
// publish gets the same error (the message stored on the master may be
// delivered; a retry is deduplicated by the inbox). Once the slave is
// back, every committed event is handled exactly once.
func TestHASyncSlaveKill(t *testing.T) {
	ha := testbed.RequireHA(t)
	ha.RequireReplication(t, rmqproc.ReplicationSync, "where a send waits for the slave")
	master := ha.Masters[0].Name
	slave := ha.Slave(master)
	e := newTxEnv(t)
	h := startHAInbox(t, e)
	h.open()
	tr := e.start(t, e.db, e.chk, nil)
	startHASweeper(t, e)
	pub := newTestPublisher(t, 0)

	l := runHALoad(t, e, tr, pub, 4)
	require.Eventually(t, func() bool { return l.n.Load() >= 100 }, 60*time.Second, 100*time.Millisecond, "the load did not start")
	killedAt := time.Now()
	ha.Kill(t, slave)
	t.Cleanup(func() { ha.Restore(t) })
	l.mu.Lock()
	failedBefore := len(l.failed)
	l.mu.Unlock()
	time.Sleep(15 * time.Second)
	l.mu.Lock()
	faultFailed := len(l.failed) - failedBefore
	unavailable := l.failErrs["ErrUnavailable FLUSH_SLAVE_TIMEOUT"]
	fenced := l.failErrs["ErrRolledBackByCheck"]
	for kind := range l.failErrs {
		if kind != "ErrUnavailable FLUSH_SLAVE_TIMEOUT" && kind != "ErrRolledBackByCheck" {
			t.Errorf("a transaction failed with %q: want ErrUnavailable (FLUSH_SLAVE_TIMEOUT) or ErrRolledBackByCheck", kind)
		}
	}
	l.mu.Unlock()
	after := l.committedSince(killedAt)
	restartAt := time.Now()
	ha.Start(t, slave)
	t.Logf("%s back after %s", slave, time.Since(restartAt).Round(time.Second))
	l.halt()
	t.Logf("sync replication, %s killed for %s: %d transactions in all, %d committed (%d while the slave was down), %d rolled back on purpose, %d failed while it was down (%d FLUSH_SLAVE_TIMEOUT, %d fenced by a check-back); %d publishes, %d failed",
		slave, restartAt.Sub(killedAt).Round(time.Second), l.n.Load(), len(l.committed), after, len(l.rolledBack), faultFailed, unavailable, fenced, len(l.published), l.pubFailed)
	require.Positive(t, unavailable+fenced, "no transaction on %s failed while its slave was down", master)
	require.Positive(t, after, "no transaction committed while %s was down", slave)
	checkOutcome(t, e, h, l, 90*time.Second)
}

// A producer commits 16 local transactions over both groups and is
// SIGKILLed before any END_TRANSACTION; broker-a is SIGKILLed right after,
// before its first check-back (transactionTimeOut 1 s). Its half messages
// wait on its disk (its slave holds copies but sends no check-backs): when
// it returns, it checks them back and the surviving producer of the group
// answers COMMIT from the barrier. The returning master checks from its
// first second, before it has registered with the name server and before
// the producer's heartbeat reaches it: each check without a producer
// channel counts toward transactionCheckMax (5 here), so on a loaded
// machine it may discard some of them into TRANS_CHECK_MAX_TIME_TOPIC
// instead, where the group's sweeper republishes them. Each half message
// of the dead master is resolved by one of the two, and each event is
// handled exactly once.
func TestHACheckBackAcrossMasterRestart(t *testing.T) {
	ha := testbed.RequireHA(t)
	dead := ha.Masters[0].Name
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	h := startHAInbox(t, e)
	h.open()
	var cb checkBackRecorder
	e.start(t, e.db, e.chk, nil, &cb)
	logs := startHASweeper(t, e)

	prefix := "child-" + testbed.Suffix()
	runClusterChild(t, e, prefix, 16)
	ha.Kill(t, dead)
	t.Cleanup(func() { ha.Restore(t) })
	killedAt := time.Now()
	time.Sleep(5 * time.Second)
	var beforeRestart int
	for i := 0; i < 16; i++ {
		if _, ok := h.handledAt(fmt.Sprintf("%s-%d", prefix, i)); ok {
			beforeRestart++
		}
	}
	restartAt := time.Now()
	ha.Start(t, dead)
	var onDead, swept int
	for i := 0; i < 16; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		obs.DeliveredWithin(t, id, 2*time.Minute)
		require.Equal(t, checker.StateCommitted, e.barrier(t, id))
		// The sweeper's line names the broker that discarded the half
		// message; a republished copy may go to either group.
		switch {
		case logs.countLines("republished it", "txmsg_id="+id+" ", "broker="+dead) > 0:
			onDead++
			swept++
		case obs.First(id).Queue.BrokerName == dead:
			onDead++
			require.True(t, cb.has(id), "%s on %s was neither checked back nor swept; sweeper logs:\n%s", id, dead, logs)
		}
	}
	require.Positive(t, onDead, "none of the killed producer's half messages was on %s", dead)
	l := &haLoad{committed: map[string]time.Time{}, published: map[string]time.Time{}}
	for i := 0; i < 16; i++ {
		l.committed[fmt.Sprintf("%s-%d", prefix, i)] = killedAt
	}
	checkOutcome(t, e, h, l, 90*time.Second)
	t.Logf("%d of 16 half messages on %s (%d checked back after its restart, %d discarded and swept); %d events handled before its restart (%s after the kill), all 16 once after it",
		onDead, dead, onDead-swept, swept, beforeRestart, restartAt.Sub(killedAt).Round(time.Second))
}

// halfMessageOn reports whether the broker at addr (a master or its
// slave) stores a half message of id: its key index, in the half topic.
func halfMessageOn(t *testing.T, addr, id string, since time.Time) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, found, err := rmqwire.QueryByKey(ctx, addr, false, "RMQ_SYS_TRANS_HALF_TOPIC", id, 32, since.Add(-time.Minute), time.Now().Add(time.Minute))
	require.NoError(t, err)
	if !found {
		return false
	}
	for _, ext := range primitive.DecodeMessage(body) {
		if ext.GetProperty(txmsg.PropertyID) == id {
			return true
		}
	}
	return false
}

// With RocketMQ 5's slave-acting-master (RIP-32: enableSlaveActingMaster
// and enableRemoteEscape on broker-a's group), a child producer commits 16
// local transactions over both groups and is SIGKILLed before any
// END_TRANSACTION; broker-a's master (where the test finds some of them
// by the half topic's key index) is SIGKILLed right after and stays
// down. Its slave then acts for it: it sends the half messages it holds
// to broker-b's master as half messages, which checks them back,
// and the surviving producer answers COMMIT from the barrier. So all 16
// events are handled while broker-a's master is still down, where without
// it (TestHACheckBackAcrossMasterRestart) those on broker-a wait for its
// return. Once the group is back, the master checks its own copies back
// too; the inbox drops those second copies and each event is handled
// exactly once.
func TestHASlaveActingMasterEscapesHalfMessages(t *testing.T) {
	ha := testbed.RequireHA(t)
	ha.RequireReplication(t, rmqproc.ReplicationAsync, "one form is enough: what the slave does without its master does not depend on the replication")
	group := ha.Masters[0].Name
	t.Cleanup(func() { ha.Restore(t) })
	ha.SlaveActingMaster(t, group, true)
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	h := startHAInbox(t, e)
	h.open()
	var cb checkBackRecorder
	e.start(t, e.db, e.chk, nil, &cb)

	prefix := "acting-" + testbed.Suffix()
	begun := time.Now()
	runClusterChild(t, e, prefix, 16)
	dead := ha.Procs.MasterOf(group)
	var masterAddr string
	for _, m := range ha.Procs.Masters() {
		if m.Name == group {
			masterAddr = m.Addr
		}
	}
	ids := make([]string, 16)
	var onDead []string
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	// Which half messages are on broker-a: its master's key index of the
	// half topic, asked before the kill (the index is written some
	// milliseconds after the message).
	require.Eventually(t, func() bool {
		onDead = onDead[:0]
		for _, id := range ids {
			if halfMessageOn(t, masterAddr, id, begun) {
				onDead = append(onDead, id)
			}
		}
		return len(onDead) > 0
	}, 20*time.Second, 500*time.Millisecond, "none of the child's half messages is on %s (%s)", group, masterAddr)
	// Replication is asynchronous: the slave can act only for the half
	// messages it has. Kill the master once the slave holds all it wrote.
	slaveAddr := ha.Procs.SlaveAddr(group)
	maxOffset := func(addr string) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		info, err := rmqwire.RuntimeInfo(ctx, addr, false)
		require.NoError(t, err, addr)
		n, err := rmqwire.CommitLogMaxOffset(info)
		require.NoError(t, err, addr)
		return n
	}
	written := maxOffset(masterAddr)
	require.Eventually(t, func() bool { return maxOffset(slaveAddr) >= written }, 30*time.Second, 200*time.Millisecond,
		"the slave of %s (%s) did not replicate the master's commit log up to %d", group, slaveAddr, written)
	ha.Kill(t, dead)
	killedAt := time.Now()

	if notYet := h.waitHandled(ids, 90*time.Second); notYet > 0 {
		t.Fatalf("%d of 16 events not handled within 90 s of the kill with %s down (%d of the half messages were on it)", notYet, dead, len(onDead))
	}
	handledBy := time.Since(killedAt)
	require.False(t, ha.Procs.Owns(dead), "%s runs again: the events must have come while it was down", dead)
	for _, id := range onDead {
		require.True(t, cb.has(id), "%s was on %s but no check-back reached the surviving producer", id, dead)
		// The observer is a consumer of its own: it may get the event
		// after the inbox handled it.
		obs.DeliveredWithin(t, id, 30*time.Second)
		require.NotEqual(t, group, obs.First(id).Queue.BrokerName, "%s was delivered from %s, whose master is down", id, group)
	}
	t.Logf("%d of 16 half messages on %s; all 16 events handled %s after its master %s was killed, while it was down (the escaped ones through %s)",
		len(onDead), group, handledBy.Round(100*time.Millisecond), dead, obs.First(onDead[0]).Queue.BrokerName)

	ha.Restore(t) // the master back, slave-acting-master off: it checks its own copies back
	l := &haLoad{committed: map[string]time.Time{}, published: map[string]time.Time{}}
	for _, id := range ids {
		l.committed[id] = killedAt
	}
	checkOutcome(t, e, h, l, 90*time.Second)
}

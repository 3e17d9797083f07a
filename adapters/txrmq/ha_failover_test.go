package txrmq

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
	"github.com/txmsg/txmsg/txmsg"
)

// haPublisher is a publisher on the HA form's name server. Not
// newTestPublisher: that one wants TXMSG_BROKER, broker-a, reachable.
func haPublisher(t *testing.T, what string) *Publisher {
	t.Helper()
	pub, err := NewPublisher(PublisherConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, what)})
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

// commitN commits n transactions of e, one after the other, each with its
// business row and an event whose body is its txmsg ID, and returns the
// IDs. Every one must commit.
func commitN(t *testing.T, e *txEnv, tr *Transactional, n int, what string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id := fmt.Sprintf("%s-%d-%s", what, i, testbed.Suffix())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rc, err := tr.Transact(ctx, &txmsg.Message{ID: id, Topic: e.topic, Body: []byte(id)}, haOrder(id))
		cancel()
		require.NoError(t, err)
		require.Equal(t, txmsg.StateCommitted, rc.State)
		ids[i] = id
	}
	return ids
}

// asLoad is the haLoad of transactions that all committed, for
// checkOutcome.
func asLoad(ids ...[]string) *haLoad {
	l := &haLoad{committed: map[string]time.Time{}, published: map[string]time.Time{}}
	for _, list := range ids {
		for _, id := range list {
			l.committed[id] = time.Now()
		}
	}
	return l
}

// A failover that loses what asynchronous replication had not copied
// yet, tested for real: broker-a's slave is paused (its replication
// stops), transactions commit (broker-a acknowledges their half messages
// and commits), then broker-a's disk is lost and its slave is promoted in
// its place (rmqproc.Instance.Promote: the failover an operator makes by
// hand, and what a controller does automatically). The events of the
// transactions committed while the slave was paused whose messages were
// on broker-a are gone from the brokers, with nothing on the producer's
// side to notice: I1 does not hold under asynchronous replication alone.
//
// Two producers commit the same way: one with a Reconciler watching the
// cluster, one without. The reconciler sees broker-a's master move to the
// slave's address, checks the events committed in its window before the
// change against the brokers' key index, and publishes again the ones
// the promoted master does not have: every event of its producer is
// handled exactly once. Of the other producer's, the lost ones are never
// handled (the test counts them, and fails unless some were lost: the
// test reached the loss), exactly the ones a Reconcile by hand afterwards
// (txmsgctl reconcile) finds missing and publishes again.
func TestHAFailoverLosesTheUnreplicatedTailAndTheReconcilerTakesItBack(t *testing.T) {
	ha := testbed.RequireHA(t)
	ha.RequireReplication(t, rmqproc.ReplicationAsync, "where a failover loses what the slave had not copied (under synchronous replication a paused slave fails sends instead: TestHASyncSlaveKill)")
	master := ha.Masters[0].Name
	slave := ha.Slave(master)
	t.Cleanup(func() { ha.Restore(t) }) // after the consumers' cleanups

	envs := map[string]*txEnv{"watched": newTxEnv(t), "bare": newTxEnv(t)}
	trs := map[string]*Transactional{}
	for name, e := range envs {
		// The barrier keeps each event's message, so that a reconciler
		// can publish it again.
		chk, err := checker.New(e.db, checker.Config{KeepMessages: true})
		require.NoError(t, err)
		require.NoError(t, chk.Migrate(context.Background()))
		e.chk = chk
		trs[name] = e.start(t, e.db, e.chk, nil)
	}
	hook := &reconcileHook{}
	rec, err := NewReconciler(envs["watched"].chk, haPublisher(t, "recpub"), ReconcilerConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Interval: time.Second, Hooks: txmsg.Hooks{hook},
	})
	require.NoError(t, err)
	require.NoError(t, rec.Start(context.Background()))
	t.Cleanup(func() { _ = rec.Close(context.Background()) })

	before, tail := map[string][]string{}, map[string][]string{}
	for name, e := range envs {
		before[name] = commitN(t, e, trs[name], 20, name+"-before")
	}
	// Their messages reach the slaves within milliseconds.
	time.Sleep(2 * time.Second)
	ha.Pause(t, slave)
	for name, e := range envs {
		tail[name] = commitN(t, e, trs[name], 40, name+"-tail")
	}
	// END_TRANSACTION is a one-way request: let broker-a store the last
	// commits before its disk goes.
	time.Sleep(time.Second)
	promoteAt := time.Now()
	ha.Promote(t, master)
	t.Logf("%s's disk lost and %s promoted in %s", master, slave, time.Since(promoteAt).Round(time.Second))

	// Consumers start only now, as consumers that lag behind would read
	// the tail after the failover: the promoted master never had it.
	inboxes := map[string]*haInbox{}
	for name, e := range envs {
		inboxes[name] = startHAInbox(t, e)
		inboxes[name].open()
	}
	checkOutcome(t, envs["watched"], inboxes["watched"], asLoad(before["watched"], tail["watched"]), 2*time.Minute)
	hook.mu.Lock()
	passes := append([][3]int(nil), hook.passes...)
	hook.mu.Unlock()
	var republished int
	for _, p := range passes {
		republished += p[2]
	}
	require.Positive(t, republished, "the watched producer's events were all handled, but the reconciler published none again (passes %v): was nothing lost?", passes)

	// The other producer's events: every one of before, and of the tail
	// those the promoted master has, once the watched ones are all in.
	bare, h := envs["bare"], inboxes["bare"]
	require.Eventually(t, func() bool {
		eff := h.effects(t)
		for _, id := range before["bare"] {
			if eff[id] == 0 {
				return false
			}
		}
		return true
	}, time.Minute, 500*time.Millisecond, "events committed before the slave was paused were lost")
	time.Sleep(10 * time.Second)
	eff := h.effects(t)
	var lost []string
	for _, id := range tail["bare"] {
		if eff[id] == 0 {
			lost = append(lost, id)
		}
	}
	t.Logf("without a reconciler: %d of the %d events committed while %s was paused lost (their messages were on %s); with one: %d republished in %d pass(es) %v, every event handled once",
		len(lost), len(tail["bare"]), slave, master, republished, len(passes), passes)
	require.NotEmpty(t, lost, "no event was lost without a reconciler: the failover did not lose the unreplicated tail")

	// A reconciliation by hand afterwards finds exactly those missing.
	byHand, err := NewReconciler(bare.chk, haPublisher(t, "handpub"), ReconcilerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}})
	require.NoError(t, err)
	now, err := bare.chk.Now(context.Background())
	require.NoError(t, err)
	res, err := byHand.Reconcile(context.Background(), now.Add(-5*time.Minute), now.Add(time.Second))
	require.NoError(t, err)
	sort.Strings(lost)
	sort.Strings(res.Missing)
	require.Equal(t, lost, res.Missing, "the reconciler's missing events are the ones never handled")
	require.Equal(t, len(lost), res.Republished)
	checkOutcome(t, bare, h, asLoad(before["bare"], tail["bare"]), time.Minute)
}

// After a failover that lost a tail, the promoted master writes new
// messages at the queue offsets the lost ones had, and a consumer that had
// read the lost tail from the old master holds offsets past the new
// master's end. Here the topic lives on broker-a alone; the consumer reads
// the tail while broker-a-s is paused; its name server stops learning (it
// answers as it did before, with broker-a-s at an address where nothing
// listens), broker-a's disk is lost, broker-a-s promoted and broker-a
// started again as its slave (a replacement machine at the old address,
// which the consumer's stale routes still give as the master), and 60
// more events commit; then the consumer's name server catches up. Every
// event written where the tail was is handled: the client's pull offsets
// went back to the new end before new messages filled the gap (its stored
// offsets stayed ahead until it passed them; they only grow).
func TestHAConsumerReadsWhatIsWrittenWhereALostTailWas(t *testing.T) {
	ha := testbed.RequireHA(t)
	ha.RequireReplication(t, rmqproc.ReplicationAsync, "where a failover loses a tail the consumer had read")
	master := ha.Masters[0]
	slave := ha.Slave(master.Name)
	t.Cleanup(func() { ha.Restore(t) }) // after the consumers' cleanups

	e := newTxEnv(t)
	// A topic of broker-a's group alone: every event goes there.
	e.topic = testbed.Name(t, "a_only")
	slaveAddr := ha.Procs.SlaveAddr(master.Name)
	require.NoError(t, testbed.CreateTopicOn(context.Background(), testbed.NameServer(), []string{master.Addr}, e.topic, 4))
	require.NoError(t, testbed.CreateTopicOn(context.Background(), testbed.NameServer(), []string{slaveAddr}, e.topic, 4))
	tr := e.start(t, e.db, e.chk, nil)
	ns := newRewritingNameServerFor(t, slaveAddr)
	h := startHAInboxOn(t, e, ns.ln.Addr().String())
	h.open()
	handled := func(ids []string) int {
		eff := h.effects(t)
		n := 0
		for _, id := range ids {
			if eff[id] > 0 {
				n++
			}
		}
		return n
	}

	before := commitN(t, e, tr, 20, "before")
	require.Eventually(t, func() bool { return handled(before) == len(before) }, time.Minute, 200*time.Millisecond)
	ha.Pause(t, slave)
	tail := commitN(t, e, tr, 40, "tail")
	// The consumer reads the tail from broker-a, past where broker-a-s
	// stopped copying.
	require.Eventually(t, func() bool { return handled(tail) == len(tail) }, time.Minute, 200*time.Millisecond)
	time.Sleep(time.Second)
	ns.frozen.Store(true)
	// Nor can the consumer reach broker-a-s: it cannot correct its
	// offsets on the new master while its queues are still shorter.
	ns.addr.Store("127.0.0.1:1")
	ha.Promote(t, master.Name)
	// broker-a's machine is replaced: it comes back as the new master's
	// slave, at the address the consumer's stale routes give broker-a's
	// master, and copies the new master's queues.
	ha.Start(t, master.Name)
	require.NoError(t, testbed.CreateTopicOn(context.Background(), testbed.NameServer(), []string{master.Addr}, e.topic, 4))

	// The producer learns the new master's address at its next route
	// refresh; until then sends to broker-a fail (nothing is written).
	var after []string
	failed, firstOK := 0, time.Time{}
	promoted := time.Now()
	for i := 0; len(after) < 60; i++ {
		require.Less(t, time.Since(promoted), 2*time.Minute, "no transaction commits after the failover")
		id := fmt.Sprintf("after-%d-%s", i, testbed.Suffix())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := tr.Transact(ctx, &txmsg.Message{ID: id, Topic: e.topic, Body: []byte(id)}, haOrder(id))
		cancel()
		if err != nil {
			failed++
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if firstOK.IsZero() {
			firstOK = time.Now()
		}
		after = append(after, id)
	}
	t.Logf("after the failover: %d transactions failed before the first commit, %s after it", failed, firstOK.Sub(promoted).Round(100*time.Millisecond))
	ns.frozen.Store(false)
	ns.addr.Store(slaveAddr)
	deadline := time.Now().Add(90 * time.Second)
	for handled(after) < len(after) && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%d of the %d events committed after the failover handled", handled(after), len(after))
	checkOutcome(t, e, h, asLoad(before, tail, after), 5*time.Second)
}

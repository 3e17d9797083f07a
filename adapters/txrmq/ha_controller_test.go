package txrmq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/rmqwire"
	"github.com/txmsg/txmsg/internal/testbed"
)

// controllerRound is one fault of TestHAControllerElectsTheSlave: what
// was done to the master and what it cost.
type controllerRound struct {
	fault    string // kill or pause
	victim   string // the master that failed
	elected  string // the broker the controller elected instead
	toElect  time.Duration
	toResume time.Duration // from the election to the first commit stored on the group
	failed   int           // transactions that got no commit during the round
}

// On the controller form (RocketMQ 5's automatic failover) broker-a's
// master is SIGKILLed, and in a second round SIGSTOPped, under
// transactions, publishes and a running inbox consumer. Each time the
// controller elects the group's other broker, which was in the in-sync
// set, and transactions are stored on the group again without any step by
// hand; the killed broker starts again and rejoins as a slave, the paused
// one is resumed and steps down. Then every committed transaction's event
// and every publish that returned nil is handled exactly once, without a
// reconciler (a send is acknowledged only once the in-sync set has it),
// and nothing of a transaction that did not commit is anywhere. The test
// reports how long each election took and how long after it the first
// transaction stored on the group committed: figures, not assertions.
func TestHAControllerElectsTheSlave(t *testing.T) {
	ha := testbed.RequireHAController(t)
	group := ha.Masters[0].Name
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	h := startHAInbox(t, e)
	h.open()
	tr := e.start(t, e.db, e.chk, nil)
	pub := newTestPublisher(t, 0)
	// Half messages whose END_TRANSACTION went to the failed master are
	// checked back by the elected one; the sweeper republishes those it
	// discarded before a producer's heartbeat reached it.
	sweeps := startHASweeper(t, e)
	t.Cleanup(func() { ha.Restore(t) })

	replicas := func() *rmqwire.Replicas {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		r, err := ha.Procs.Replicas(ctx, group)
		require.NoError(t, err)
		return r
	}
	// storedOnGroupSince is the time of the first transaction committed
	// after at whose event the observer saw stored on group.
	storedOnGroupSince := func(l *haLoad, at time.Time) (time.Time, bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		var first time.Time
		for id, when := range l.committed {
			if when.After(at) && (first.IsZero() || when.Before(first)) && obs.Count(id) > 0 && obs.First(id).Queue.BrokerName == group {
				first = when
			}
		}
		return first, !first.IsZero()
	}

	l := runHALoad(t, e, tr, pub, 4)
	var rounds []controllerRound
	for _, fault := range []string{"kill", "pause"} {
		before := replicas()
		require.Len(t, before.SyncStateSet, 2, "the in-sync set of %s before the %s: the controller could elect no slave", group, fault)
		victim := ha.Procs.NameAt(before.MasterAddr)
		require.NotEmpty(t, victim, "the controller names %s the master of %s: no broker of the form", before.MasterAddr, group)
		require.Eventually(t, func() bool {
			_, ok := storedOnGroupSince(l, time.Now().Add(-2*time.Second))
			return ok
		}, 90*time.Second, 100*time.Millisecond, "no commit stored on %s before the %s", group, fault)

		l.mu.Lock()
		failedBefore := len(l.failed)
		l.mu.Unlock()
		faultAt := time.Now()
		if fault == "kill" {
			ha.Kill(t, victim)
		} else {
			ha.Pause(t, victim)
		}
		var after *rmqwire.Replicas
		require.Eventually(t, func() bool {
			after = replicas()
			return after.MasterEpoch > before.MasterEpoch && after.MasterAddr != "" && after.MasterAddr != before.MasterAddr
		}, 60*time.Second, 50*time.Millisecond, "the controller elected no new master of %s after the %s of %s", group, fault, victim)
		electedAt := time.Now()
		var resumedAt time.Time
		require.Eventually(t, func() bool {
			var ok bool
			resumedAt, ok = storedOnGroupSince(l, electedAt)
			return ok
		}, 90*time.Second, 100*time.Millisecond, "no transaction stored on %s committed after the controller elected %s", group, after.MasterAddr)
		r := controllerRound{fault: fault, victim: victim, elected: ha.Procs.NameAt(after.MasterAddr),
			toElect: electedAt.Sub(faultAt), toResume: max(resumedAt.Sub(electedAt), 0)}

		// The failed broker comes back as a slave of the elected one.
		if fault == "kill" {
			ha.Start(t, victim)
		} else {
			ha.Resume(t, victim)
		}
		// A resumed master steps down only once its delayed-message
		// service has stopped, which waits 60 s for deliveries blocked
		// on acknowledgements that no longer come.
		for deadline := time.Now().Add(150 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			last := replicas()
			if last.MasterAddr == after.MasterAddr && len(last.SyncStateSet) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not rejoin %s as a slave in the in-sync set within 150 s; the controller last said %+v", victim, group, *last)
			}
		}
		l.mu.Lock()
		r.failed = len(l.failed) - failedBefore
		l.mu.Unlock()
		rounds = append(rounds, r)
		t.Logf("%s of %s: the controller elected %s after %s; the first commit stored on %s %s after the election; %d transactions got no commit until %s rejoined",
			r.fault, r.victim, r.elected, r.toElect.Round(10*time.Millisecond), group, r.toResume.Round(10*time.Millisecond), r.failed, r.victim)
	}
	l.halt()
	t.Logf("%d transactions in all, %d committed, %d rolled back on purpose, %d failed (%v); %d publishes, %d failed",
		l.n.Load(), len(l.committed), len(l.rolledBack), len(l.failed), l.failErrs, len(l.published), l.pubFailed)
	checkOutcome(t, e, h, l, 90*time.Second)
	t.Logf("%d half messages republished by the sweeper", sweeps.countLines("republished it"))
}

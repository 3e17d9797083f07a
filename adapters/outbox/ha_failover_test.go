package outbox

import (
	"context"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
	"github.com/txmsg/txmsg/txmsg"
)

// The local-table counterpart of txrmq's
// TestHAFailoverLosesTheUnreplicatedTailAndTheReconcilerTakesItBack: two
// outboxes, each with its relay, commit rows while broker-a's slave is
// paused, and the relays publish them (broker-a acknowledges, the rows are
// marked sent); then broker-a's disk is lost and its slave promoted in its
// place. Of the outbox whose Reconciler watches the cluster, every event
// is handled exactly once; of the other, the rows whose messages were on
// broker-a are marked sent and never handled, exactly the ones a
// Reconcile by hand afterwards finds missing and publishes again.
func TestHAFailoverLosesTheUnreplicatedTailAndTheReconcilerTakesItBack(t *testing.T) {
	ha := testbed.RequireHA(t)
	ha.RequireReplication(t, rmqproc.ReplicationAsync, "where a failover loses what the slave had not copied")
	master := ha.Masters[0].Name
	slave := ha.Slave(master)
	t.Cleanup(func() { ha.Restore(t) }) // after the consumers' cleanups

	envs := map[string]*env{"watched": brokerEnv(t), "bare": brokerEnv(t)}
	for _, e := range envs {
		start(t, e.relay(brokerPublisher(t), RelayConfig{}))
	}
	var republished atomic.Int64
	rec, err := txrmq.NewReconciler(envs["watched"].ob, brokerPublisher(t), txrmq.ReconcilerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Interval: time.Second,
		Hooks: txmsg.Hooks{republishedHook{&republished}},
	})
	require.NoError(t, err)
	require.NoError(t, rec.Start(context.Background()))
	t.Cleanup(func() { _ = rec.Close(context.Background()) })

	relayed := func(e *env) {
		require.Eventually(t, func() bool { return e.stats().Pending == 0 }, waitFor, tick)
	}
	before, tail := map[string][]string{}, map[string][]string{}
	for name, e := range envs {
		before[name] = e.send(20, name+"-before", withKeys)
		relayed(e)
	}
	// Their messages reach the slaves within milliseconds.
	time.Sleep(2 * time.Second)
	ha.Pause(t, slave)
	for name, e := range envs {
		tail[name] = e.send(40, name+"-tail", withKeys)
		relayed(e)
	}
	promoteAt := time.Now()
	ha.Promote(t, master)
	t.Logf("%s's disk lost and %s promoted in %s", master, slave, time.Since(promoteAt).Round(time.Second))

	// Consumers start only now, as consumers that lag behind would read
	// the tail after the failover.
	counters := map[string]*counter{}
	for name, e := range envs {
		counters[name] = startCounter(t, e)
	}
	all := func(name string) []string { return append(append([]string{}, before[name]...), tail[name]...) }
	onceEach := func(name string) {
		ids := all(name)
		require.Eventually(t, func() bool { return counters[name].count(ids) == len(ids) }, 2*time.Minute, 200*time.Millisecond,
			"%s: %d of %d events handled", name, counters[name].count(ids), len(ids))
		time.Sleep(2 * time.Second) // let a duplicate delivery, if any, be handled
		for _, id := range ids {
			require.Equal(t, 1, counters[name].times(id), "%s handled %d times", id, counters[name].times(id))
		}
	}
	onceEach("watched")
	require.Positive(t, republished.Load(), "the watched outbox's events were all handled, but its reconciler published none again: was nothing lost?")

	bare := counters["bare"]
	require.Eventually(t, func() bool { return bare.count(before["bare"]) == len(before["bare"]) }, time.Minute, 200*time.Millisecond,
		"events relayed before the slave was paused were lost")
	time.Sleep(10 * time.Second)
	var lost []string
	for _, id := range tail["bare"] {
		if bare.times(id) == 0 {
			lost = append(lost, id)
		}
	}
	t.Logf("without a reconciler: %d of the %d rows relayed while %s was paused lost (their messages were on %s); with one: %d published again, every event handled once",
		len(lost), len(tail["bare"]), slave, master, republished.Load())
	require.NotEmpty(t, lost, "no event was lost without a reconciler: the failover did not lose the unreplicated tail")

	byHand, err := txrmq.NewReconciler(envs["bare"].ob, brokerPublisher(t), txrmq.ReconcilerConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}})
	require.NoError(t, err)
	now, err := envs["bare"].ob.Now(context.Background())
	require.NoError(t, err)
	res, err := byHand.Reconcile(context.Background(), now.Add(-5*time.Minute), now.Add(time.Second))
	require.NoError(t, err)
	sort.Strings(lost)
	sort.Strings(res.Missing)
	require.Equal(t, lost, res.Missing, "the reconciler's missing events are the ones never handled")
	require.Equal(t, len(lost), res.Republished)
	onceEach("bare")
}

// republishedHook adds up the events a reconciler published again.
type republishedHook struct{ n *atomic.Int64 }

func (h republishedHook) OnReconciled(_ context.Context, _ string, _, _, republished int, _ error, _ time.Duration) {
	h.n.Add(int64(republished))
}

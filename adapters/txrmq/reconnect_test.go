package txrmq

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"
)

// fakeProber routes topic "t" to broker "b" at addr: the route part is
// pure logic; the broker's reachability is a real listening socket.
type fakeProber struct{ addr string }

func (f fakeProber) FetchSubscribeMessageQueues(topic string) ([]*primitive.MessageQueue, error) {
	return []*primitive.MessageQueue{{Topic: topic, BrokerName: "b"}}, nil
}
func (f fakeProber) FindBrokerAddrByName(string) string { return f.addr }

// TestReconnectorRefreshesWhenABrokerComesBackAndOnKick: a broker that
// stops accepting connections and accepts them again triggers a refresh
// without any send; a failed send (kick) triggers one too.
func TestReconnectorRefreshesWhenABrokerComesBackAndOnKick(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	var n atomic.Int32
	r := newReconnector(slog.New(slog.NewTextHandler(io.Discard, nil)), []string{"t"}, fakeProber{addr}, func() { n.Add(1) })
	r.interval, r.minGap, r.followUps = 50*time.Millisecond, 50*time.Millisecond, 2
	r.start()
	defer r.close()

	r.kick()
	require.Eventually(t, func() bool { return n.Load() == 1 }, 10*time.Second, 10*time.Millisecond, "a kick refreshes")

	require.NoError(t, ln.Close()) // the broker goes away
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int32(1), n.Load(), "an unreachable broker alone does not refresh")
	ln, err = net.Listen("tcp", addr) // and comes back on the same address
	require.NoError(t, err)
	defer ln.Close()
	require.Eventually(t, func() bool { return n.Load() >= 2 }, 10*time.Second, 10*time.Millisecond, "its return refreshes")
	require.Eventually(t, func() bool { return n.Load() == 4 }, 10*time.Second, 10*time.Millisecond, "and so do the follow-ups")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int32(4), n.Load(), "no more than the follow-ups")
}

func TestReconnectorNilIsANoOp(t *testing.T) {
	var r *reconnector
	r.start()
	r.kick()
	r.close()
	require.Nil(t, newReconnector(slog.Default(), nil, nil, nil))
}

// TestReconnectorSignalsReturnsOfWatchedTopicsBrokers: a reconnector built
// without topics learns the broker of a topic given to watch; when that
// broker stops and again accepts connections, every subscriber is
// signalled after the refresh and after each follow-up, never after a
// refresh asked for by a kick, and a stopped subscription is not.
func TestReconnectorSignalsReturnsOfWatchedTopicsBrokers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	var refreshes atomic.Int32
	var sig returnSignal
	r := newReconnector(slog.New(slog.NewTextHandler(io.Discard, nil)), nil, fakeProber{addr}, func() { refreshes.Add(1) })
	r.returned = sig.fire
	r.interval, r.minGap, r.followUps = 50*time.Millisecond, 50*time.Millisecond, 2
	a, stopA := sig.subscribe()
	defer stopA()
	b, stopB := sig.subscribe()
	stopB()
	var signals atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-a:
				signals.Add(1)
			case <-time.After(5 * time.Second):
				return
			}
		}
	}()
	r.start()
	defer r.close()
	r.watch("t")
	r.watch("t") // again: no second look-up needed

	r.kick()
	require.Eventually(t, func() bool { return refreshes.Load() == 1 }, 10*time.Second, 10*time.Millisecond, "a kick refreshes")
	require.NoError(t, ln.Close())
	time.Sleep(300 * time.Millisecond)
	require.Zero(t, signals.Load(), "neither a kick nor a broker going away signals")

	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	defer ln.Close()
	require.Eventually(t, func() bool { return refreshes.Load() == 4 }, 10*time.Second, 10*time.Millisecond, "the return and its follow-ups refresh")
	require.Eventually(t, func() bool { return signals.Load() >= 1 }, 10*time.Second, 10*time.Millisecond, "the return signals")
	<-done
	require.LessOrEqual(t, signals.Load(), int32(3), "one signal per refresh after the return at most")
	select {
	case <-b:
		t.Fatal("a stopped subscription was signalled")
	default:
	}
}

// TestReconnectorPassesReturnedBrokersToStuck: when a broker stops and
// again accepts connections, stuck is called once, before the refresh
// that follows, with the broker's name and the time it was first seen
// gone (after it went away, before it came back); neither a kick nor the
// follow-ups call it.
func TestReconnectorPassesReturnedBrokersToStuck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	var refreshes atomic.Int32
	var calls atomic.Int32
	var got atomic.Value // map[string]time.Time
	var refreshesAtCall atomic.Int32
	r := newReconnector(slog.New(slog.NewTextHandler(io.Discard, nil)), []string{"t"}, fakeProber{addr}, func() { refreshes.Add(1) })
	r.stuck = func(m map[string]time.Time) {
		calls.Add(1)
		refreshesAtCall.Store(refreshes.Load())
		got.Store(m)
	}
	r.interval, r.minGap, r.followUps = 50*time.Millisecond, 50*time.Millisecond, 2
	r.start()
	defer r.close()

	r.kick()
	require.Eventually(t, func() bool { return refreshes.Load() == 1 }, 10*time.Second, 10*time.Millisecond, "a kick refreshes")
	wentAway := time.Now()
	require.NoError(t, ln.Close())
	time.Sleep(300 * time.Millisecond)
	cameBack := time.Now()
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	defer ln.Close()
	require.Eventually(t, func() bool { return refreshes.Load() == 4 }, 10*time.Second, 10*time.Millisecond, "the return and its follow-ups refresh")
	require.Equal(t, int32(1), calls.Load(), "stuck is called once per return")
	require.Equal(t, int32(1), refreshesAtCall.Load(), "before the return's refresh")
	m := got.Load().(map[string]time.Time)
	require.Len(t, m, 1)
	require.Contains(t, m, "b")
	require.False(t, m["b"].Before(wentAway), "gone since %v, went away at %v", m["b"], wentAway)
	require.True(t, m["b"].Before(cameBack), "gone since %v, came back at %v", m["b"], cameBack)
}

// lateProber routes topic "t" to broker "b" at addr only once route is
// set: until then the name server has no route, as when the broker died
// just before the watcher first looked.
type lateProber struct {
	addr  string
	route atomic.Bool
}

func (p *lateProber) FetchSubscribeMessageQueues(topic string) ([]*primitive.MessageQueue, error) {
	if !p.route.Load() {
		return nil, errors.New("topic route info not found")
	}
	return []*primitive.MessageQueue{{Topic: topic, BrokerName: "b"}}, nil
}

func (p *lateProber) FindBrokerAddrByName(string) string {
	if !p.route.Load() {
		return ""
	}
	return p.addr
}

// TestReconnectorTreatsALateBrokerAsReturned: a broker missing from the
// routes at the watcher's first look (it died just before) that appears
// at a later look counts as a return: stuck gets it with the time of the
// look that missed it, and the watcher refreshes, with follow-ups.
func TestReconnectorTreatsALateBrokerAsReturned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	p := &lateProber{addr: ln.Addr().String()}
	var refreshes atomic.Int32
	var got atomic.Value // map[string]time.Time
	started := time.Now()
	r := newReconnector(slog.New(slog.NewTextHandler(io.Discard, nil)), []string{"t"}, p, func() { refreshes.Add(1) })
	r.stuck = func(m map[string]time.Time) { got.Store(m) }
	r.interval, r.minGap, r.followUps, r.namesEvery = 50*time.Millisecond, 50*time.Millisecond, 2, 100*time.Millisecond
	r.start()
	defer r.close()

	time.Sleep(300 * time.Millisecond) // several looks without a route
	require.Zero(t, refreshes.Load())
	appeared := time.Now()
	p.route.Store(true)
	require.Eventually(t, func() bool { return refreshes.Load() == 3 }, 10*time.Second, 10*time.Millisecond, "the appearance and its follow-ups refresh")
	m, _ := got.Load().(map[string]time.Time)
	require.Len(t, m, 1, "stuck was not called")
	require.True(t, m["b"].After(started), "gone since %v, watcher started %v", m["b"], started)
	require.True(t, m["b"].Before(appeared), "gone since %v, appeared at %v", m["b"], appeared)
}

// movingProber is a client whose broker "b" is at the address stored in
// addr, which its refresh sets to the name server's.
type movingProber struct{ addr atomic.Value }

func (p *movingProber) FetchSubscribeMessageQueues(topic string) ([]*primitive.MessageQueue, error) {
	return []*primitive.MessageQueue{{Topic: topic, BrokerName: "b"}}, nil
}
func (p *movingProber) FindBrokerAddrByName(string) string { return p.addr.Load().(string) }

// TestReconnectorRefreshesWhenTheMasterMoves: the client's master of "b"
// stops accepting connections and the name server routes another
// address (a failover): the watcher refreshes at once, passes "b" to
// stuck as gone since it saw the move, and stops once the client's
// refresh has the name server's address.
func TestReconnectorRefreshesWhenTheMasterMoves(t *testing.T) {
	oldLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	newLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer newLn.Close()
	p := &movingProber{}
	p.addr.Store(oldLn.Addr().String())
	var nsMaster atomic.Value
	nsMaster.Store(oldLn.Addr().String())
	var refreshes atomic.Int32
	var got atomic.Value // map[string]time.Time
	r := newReconnector(slog.New(slog.NewTextHandler(io.Discard, nil)), []string{"t"}, p, func() {
		refreshes.Add(1)
		p.addr.Store(nsMaster.Load().(string)) // the client learns the route
	})
	r.masters = func(context.Context, string) (map[string]string, error) {
		return map[string]string{"b": nsMaster.Load().(string)}, nil
	}
	r.stuck = func(m map[string]time.Time) { got.Store(m) }
	// The regular look is far off: only the gone broker's quick looks
	// can find the move.
	r.interval, r.minGap, r.followUps, r.namesEvery = 50*time.Millisecond, 50*time.Millisecond, 0, time.Hour
	r.start()
	defer r.close()

	time.Sleep(200 * time.Millisecond)
	require.Zero(t, refreshes.Load(), "same master: no refresh")
	require.NoError(t, oldLn.Close()) // the master dies
	time.Sleep(200 * time.Millisecond)
	require.Zero(t, refreshes.Load(), "a dead master alone does not refresh")
	moved := time.Now()
	nsMaster.Store(newLn.Addr().String()) // and the name server routes its successor
	require.Eventually(t, func() bool { return refreshes.Load() >= 1 }, 10*time.Second, 10*time.Millisecond, "the move refreshes")
	m, _ := got.Load().(map[string]time.Time)
	require.Len(t, m, 1, "stuck was not called")
	// Every pull sent before the move was seen went to the old address:
	// all of them are re-created.
	require.True(t, m["b"].After(moved), "gone since %v, the name server moved the master at %v", m["b"], moved)
	n := refreshes.Load()
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, n, refreshes.Load(), "the client has the new master: no more refreshes")
	require.Equal(t, newLn.Addr().String(), p.FindBrokerAddrByName("b"))
}

// scriptedProbe answers the watcher's connects: silent while silentLeft
// is above zero (one per probe), refused while refused is set, else up.
type scriptedProbe struct {
	silentLeft atomic.Int32
	refused    atomic.Bool
	probes     atomic.Int32
}

func (p *scriptedProbe) probe(string, time.Duration) probeResult {
	p.probes.Add(1)
	if p.silentLeft.Add(-1) >= 0 {
		return probeSilent
	}
	p.silentLeft.Store(0)
	if p.refused.Load() {
		return probeRefused
	}
	return probeUp
}

// TestReconnectorTakesOneSilentLookForNothing: one connect without an
// answer between answered ones (the watcher's process held up, not the
// broker gone) neither refreshes nor signals nor re-creates pulls; two in
// a row make the broker gone, and its answering again is a return; a
// refused connect makes it gone at once.
func TestReconnectorTakesOneSilentLookForNothing(t *testing.T) {
	p := &scriptedProbe{}
	var refreshes, signals, stuckCalls atomic.Int32
	r := newReconnector(slog.New(slog.NewTextHandler(io.Discard, nil)), []string{"t"}, fakeProber{"b:1"}, func() { refreshes.Add(1) })
	r.probe = p.probe
	r.returned = func() { signals.Add(1) }
	r.stuck = func(map[string]time.Time) { stuckCalls.Add(1) }
	r.interval, r.minGap, r.followUps = 20*time.Millisecond, 20*time.Millisecond, 0
	r.start()
	defer r.close()

	// probeAfter waits until the watcher has probed n more times.
	probeAfter := func(n int32) {
		t.Helper()
		from := p.probes.Load()
		require.Eventually(t, func() bool { return p.probes.Load() >= from+n }, 10*time.Second, 5*time.Millisecond)
	}
	probeAfter(3)
	for i := 0; i < 5; i++ {
		p.silentLeft.Store(1)
		probeAfter(3)
	}
	require.Zero(t, refreshes.Load(), "single silent looks refreshed")
	require.Zero(t, signals.Load(), "single silent looks signalled")
	require.Zero(t, stuckCalls.Load(), "single silent looks re-created pulls")

	p.silentLeft.Store(2)
	probeAfter(4)
	require.Eventually(t, func() bool { return refreshes.Load() == 1 }, 10*time.Second, 5*time.Millisecond, "two silent looks and an answer: a return")
	require.Equal(t, int32(1), signals.Load())
	require.Equal(t, int32(1), stuckCalls.Load())

	p.refused.Store(true)
	probeAfter(1)
	p.refused.Store(false)
	require.Eventually(t, func() bool { return refreshes.Load() == 2 }, 10*time.Second, 5*time.Millisecond, "one refused look and an answer: a return")
	require.Equal(t, int32(2), stuckCalls.Load())
}

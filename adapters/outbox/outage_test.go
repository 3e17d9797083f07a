package outbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// tries wraps a publisher and counts how often each message was handed
// to it.
type tries struct {
	inner txmsg.Publisher
	mu    sync.Mutex
	n     map[string]int
}

func newTries(inner txmsg.Publisher) *tries { return &tries{inner: inner, n: map[string]int{}} }

func (p *tries) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		p.n[m.ID]++
	}
	p.mu.Unlock()
	return p.inner.Publish(ctx, msgs...)
}

// least is the fewest tries of any of ids.
func (p *tries) least(ids []string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	least := -1
	for _, id := range ids {
		if least < 0 || p.n[id] < least {
			least = p.n[id]
		}
	}
	return least
}

// switchable publishes through the publisher it holds at the moment.
type switchable struct {
	p *atomic.Pointer[txrmq.Publisher]
}

func (s switchable) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	return s.p.Load().Publish(ctx, msgs...)
}

// publisherAt starts a real publisher whose name server is at addr.
func publisherAt(t *testing.T, addr string) *txrmq.Publisher {
	t.Helper()
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{addr}}, Group: testbed.Name(t, "pub"), SendTimeout: time.Second, Retries: 1})
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

// TestBrokerLongOutageNoDeadRows: relays with MaxAttempts 3 and tiny
// backoffs fail for seconds against a name server nobody answers (many
// times more failed cycles than MaxAttempts). No row is parked: they wait,
// show in Stats.Waiting and in the Health of every relay (each leases
// buckets with waiting rows: there is a key per bucket), and go out, in
// key order, once the relays reach the real broker, either by being
// pointed at it or because the route comes back.
func TestBrokerLongOutageNoDeadRows(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "a broker outage test, which no collation or isolation level changes")
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			e := brokerEnv(t)
			obs := testbed.Observe(t, e.topic, nil)
			cfg := func(name string) RelayConfig {
				return RelayConfig{
					Name: name, Ordered: ordered, MaxAttempts: 3,
					MinBackoff: 5 * time.Millisecond, MaxBackoff: 30 * time.Millisecond,
					PollInterval: 20 * time.Millisecond, LeaseTTL: time.Second,
				}
			}
			// One key per bucket: whichever buckets a relay leases, it
			// tries rows that wait, and so knows of the outage.
			var keyNames []string
			for i, have := 0, map[int]bool{}; len(keyNames) < DefaultBuckets; i++ {
				key := fmt.Sprintf("key-%d", i)
				if b := bucketOf(key, DefaultBuckets); !have[b] {
					have[b] = true
					keyNames = append(keyNames, key)
				}
			}
			keys := len(keyNames)
			const perKeyN = 4
			var ids []string
			for i := range perKeyN {
				for _, key := range keyNames {
					m := &txmsg.Message{Topic: e.topic, ShardingKey: key, Body: fmt.Appendf(nil, "%s:%d", key, i)}
					r, err := e.ob.Transact(context.Background(), m, createOrder(string(m.Body)))
					require.NoError(t, err)
					ids = append(ids, r.ID)
				}
			}
			n := len(ids)

			// The relays' publisher has a name server nobody listens on.
			var route atomic.Pointer[txrmq.Publisher]
			route.Store(publisherAt(t, "127.0.0.1:1"))
			pub := newTries(switchable{&route})
			var relays []*Relay
			var runs []*running
			for i := range 2 {
				r := e.relay(pub, cfg(fmt.Sprintf("outage-%v-%d", ordered, i)))
				relays = append(relays, r)
				runs = append(runs, start(t, r))
			}
			// Ordered relays try only the first row of each key; the rest
			// wait behind it.
			tried := ids
			if ordered {
				tried = ids[:keys]
			}
			began := time.Now()
			require.Eventually(t, func() bool {
				return e.stats().Parked > 0 || (pub.least(tried) >= 4*3 && time.Since(began) > 3*time.Second)
			}, 2*time.Minute, 50*time.Millisecond, "rows tried four times MaxAttempts, for seconds")
			s := e.stats()
			require.Zero(t, s.Parked, "a broker outage parks no row")
			require.EqualValues(t, n, s.Pending)
			require.EqualValues(t, len(tried), s.Waiting, "the rows tried wait for the broker")
			for _, row := range e.rows("") {
				require.Zero(t, row.Attempts)
			}
			// A relay records the outage in Health after its cycle returns,
			// a moment after the rows it tried wait.
			for _, r := range relays {
				require.Eventually(t, func() bool { return errors.Is(r.Health(context.Background()), txmsg.ErrUnavailable) }, 30*time.Second, tick,
					"relay %s reports the broker unavailable in Health", r.Name())
			}
			require.Zero(t, obs.Total())

			if ordered {
				route.Store(brokerPublisher(t)) // the same relays recover
			} else {
				for _, rr := range runs {
					require.NoError(t, rr.stop(t))
				}
				real := brokerPublisher(t)
				for i := range 2 {
					start(t, e.relay(real, cfg(fmt.Sprintf("pointed-%d", i))))
				}
			}
			require.Eventually(t, func() bool { return e.stats().Sent == int64(n) }, 2*time.Minute, 50*time.Millisecond)
			require.Eventually(t, func() bool { return obs.Distinct() == n }, time.Minute, 50*time.Millisecond)
			s = e.stats()
			require.Zero(t, s.Parked)
			require.Zero(t, s.Waiting)
			if ordered {
				for _, r := range relays {
					require.Eventually(t, func() bool { return r.Health(context.Background()) == nil }, waitFor, tick)
				}
				requireStoredInKeyOrder(t, obs, keys, perKeyN)
			}
		})
	}
}

// requireStoredInKeyOrder checks that each key's events were stored on
// one queue in commit order (bodies "key:seq").
func requireStoredInKeyOrder(t *testing.T, obs *testbed.Observer, keys, perKeyN int) {
	t.Helper()
	stored := obs.Order()
	sort.SliceStable(stored, func(i, j int) bool { return stored[i].QueueOffset < stored[j].QueueOffset })
	queues := map[string]map[int]bool{}
	seen := map[string]bool{}
	var msgs []*txmsg.Message
	for _, m := range stored {
		k := m.GetProperty(txmsg.PropertyShardingKey)
		if queues[k] == nil {
			queues[k] = map[int]bool{}
		}
		queues[k][m.Queue.QueueId] = true
		id := m.GetProperty(txmsg.PropertyID)
		if seen[id] {
			continue // a redelivery of the observer, not a second send
		}
		seen[id] = true
		msgs = append(msgs, &txmsg.Message{Body: m.Body, ShardingKey: k})
	}
	for k, q := range queues {
		require.Len(t, q, 1, "all of %s on one queue", k)
	}
	want := make([]int, perKeyN)
	for i := range want {
		want[i] = i
	}
	got := perKey(t, msgs)
	require.Len(t, got, keys)
	for k, seqs := range got {
		require.Equal(t, want, seqs, "stored order of %s", k)
	}
}

// TestBrokerRejectedMessageIsParked: a message the broker itself refuses
// (a body over its 4 MiB maxMessageSize) still counts its attempts and is
// parked after MaxAttempts, while the messages around it go out.
func TestBrokerRejectedMessageIsParked(t *testing.T) {
	t.Parallel()
	testbed.QuietClientLogs()
	testbed.RequireBroker(t)
	e := newEnv(t, Config{MaxBodySize: 5 << 20})
	e.topic = testbed.Topic(t)
	obs := testbed.Observe(t, e.topic, nil)
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "pub"), MaxBodySize: 5 << 20})
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	big := make([]byte, 4<<20+1024)
	_, _ = rand.Read(big) // incompressible: the client compresses large bodies
	good0 := e.send(1, "good-0")[0]
	r, err := e.ob.Transact(context.Background(), &txmsg.Message{Topic: e.topic, Body: big}, createOrder("big"))
	require.NoError(t, err)
	good1 := e.send(1, "good-1")[0]

	start(t, e.relay(pub, RelayConfig{MaxAttempts: 3, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}))
	require.Eventually(t, func() bool { s := e.stats(); return s.Parked == 1 && s.Sent == 2 }, time.Minute, 50*time.Millisecond)
	dead := e.rows("status = ?", StatusParked)
	require.Len(t, dead, 1)
	require.Equal(t, r.ID, dead[0].MsgID)
	require.Equal(t, 3, dead[0].Attempts)
	require.Contains(t, dead[0].LastError, "CODE: 13")
	require.Zero(t, e.stats().Waiting)
	obs.Delivered(t, good0)
	obs.Delivered(t, good1)
	require.Zero(t, obs.Count(r.ID))
}

// TestOrderedWaitingRowHoldsItsKey: while the first row of a key waits for
// an unavailable broker, even with MaxAttempts 1, the later rows of that
// key are not published ahead of it; other keys go on.
func TestOrderedWaitingRowHoldsItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Buckets: 1})
	pub := newMemPublisher()
	var away atomic.Bool
	away.Store(true)
	pub.setFail(func(m *txmsg.Message) error {
		if away.Load() && string(m.Body) == "k:0" {
			return fmt.Errorf("%w: no route to k's queue", txmsg.ErrUnavailable)
		}
		return nil
	})
	for i := range 5 {
		e.sendKeyed("k", i)
		e.sendKeyed("other", i)
	}
	cfg := orderedConfig("waiting")
	cfg.MaxAttempts = 1
	start(t, e.relay(pub, cfg))
	require.Eventually(t, func() bool { return len(perKey(t, pub.published())["other"]) == 5 }, waitFor, tick)
	require.Eventually(t, func() bool { return e.stats().Waiting == 1 }, waitFor, tick)
	time.Sleep(300 * time.Millisecond) // many cycles
	require.Empty(t, perKey(t, pub.published())["k"], "k's later rows wait for k:0")
	require.Zero(t, e.stats().Parked)

	away.Store(false)
	require.Eventually(t, func() bool { return len(perKey(t, pub.published())["k"]) == 5 }, waitFor, tick)
	require.Equal(t, []int{0, 1, 2, 3, 4}, perKey(t, pub.published())["k"])
}

// returningPublisher is a memPublisher that signals a broker's return on
// demand (txmsg.BrokerReturnNotifier).
type returningPublisher struct {
	*memPublisher
	sig chan struct{}
}

func (p *returningPublisher) NotifyBrokerReturn() (<-chan struct{}, func()) { return p.sig, func() {} }

// TestRelayRetriesWaitingRowsWhenTheBrokerReturns: rows that wait for the
// broker with an hour's backoff (MinBackoff = MaxWaitBackoff = 1 h) are
// retried at once, in both modes, when the publisher signals a broker's
// return, and again when the relay publishes a new row after an outage.
// Key order holds in ordered mode. (Against a real broker restart:
// TestBrokerRestartWaitingRowsGoOutAtOnce.)
func TestRelayRetriesWaitingRowsWhenTheBrokerReturns(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{})
			pub := &returningPublisher{memPublisher: newMemPublisher(), sig: make(chan struct{}, 1)}
			var away atomic.Bool
			pub.setFail(func(*txmsg.Message) error {
				if away.Load() {
					return fmt.Errorf("%w: connection refused", txmsg.ErrUnavailable)
				}
				return nil
			})
			r := e.relay(pub, RelayConfig{Ordered: ordered, MinBackoff: time.Hour, MaxBackoff: time.Hour})
			require.Equal(t, time.Hour, r.cfg.MaxWaitBackoff)
			start(t, r)
			waitingHour := func(n int64) bool {
				var c int64
				require.NoError(t, e.db.Table(e.ob.Table()).
					Where("status = ? AND last_error LIKE ? AND next_attempt_at > ?", StatusPending, waitingPrefix+"%", time.Now().UTC().Add(20*time.Minute)).
					Count(&c).Error)
				return c == n
			}

			away.Store(true)
			for i := range 3 {
				e.sendKeyed("k", i)
			}
			e.sendKeyed("other", 0)
			// Ordered: k:0 and other:0 wait, k:1 and k:2 wait behind k:0.
			tried := int64(4)
			if ordered {
				tried = 2
			}
			require.Eventually(t, func() bool { return waitingHour(tried) }, waitFor, tick)
			// The relay records the outage after its cycle, a moment after the rows.
			require.Eventually(t, func() bool { return errors.Is(r.Health(context.Background()), txmsg.ErrUnavailable) }, waitFor, tick)
			away.Store(false)
			pub.sig <- struct{}{}
			require.Eventually(t, func() bool { return e.stats().Sent == 4 }, waitFor, tick, "a broker's return retries the waiting rows")

			away.Store(true)
			for i := 3; i < 6; i++ {
				e.sendKeyed("k", i)
			}
			tried = 3
			if ordered {
				tried = 1
			}
			require.Eventually(t, func() bool { return waitingHour(tried) }, waitFor, tick)
			away.Store(false)
			e.sendKeyed("other", 1) // the relay publishes this one, and so learns the broker is back
			require.Eventually(t, func() bool { return e.stats().Sent == 8 }, waitFor, tick, "publishing again retries the waiting rows")
			require.Eventually(t, func() bool { return r.Health(context.Background()) == nil }, waitFor, tick)
			if ordered {
				require.Equal(t, []int{0, 1, 2, 3, 4, 5}, perKey(t, pub.published())["k"])
			}
		})
	}
}

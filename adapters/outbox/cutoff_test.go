package outbox

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestBrokerCutOffRelayHandsOver: of two relays of one table, one reaches
// the database but not the broker (a real publisher whose name server
// refuses connections). Within HandOverAfter of its failures it hands its
// buckets over: the other relay publishes every row, keyed and unkeyed,
// from all buckets, while the cut-off relay's Health says it cannot reach
// the broker. Pointed at the broker, the cut-off relay takes buckets
// again and publishes.
func TestBrokerCutOffRelayHandsOver(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			e := brokerEnv(t)
			obs := testbed.Observe(t, e.topic, nil)
			cfg := func(name string) RelayConfig {
				return RelayConfig{
					Name: name, Ordered: ordered, LeaseTTL: time.Second, HandOverAfter: 2 * time.Second,
					MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
					PollInterval: 20 * time.Millisecond, SettleDelay: time.Millisecond,
				}
			}
			var route atomic.Pointer[txrmq.Publisher]
			route.Store(publisherAt(t, "127.0.0.1:1"))
			cut := e.relay(switchable{&route}, cfg("cut-off"))
			start(t, cut)
			// The hand-over lasts HandOverAfter; once the other relay
			// has sent every row the cut-off one fails no more and stays
			// in the lease rounds. So it is watched from the start, with
			// its Health at that moment.
			var handedOver atomic.Pointer[error]
			watchDone := make(chan struct{})
			t.Cleanup(func() { close(watchDone) })
			go func() {
				for {
					select {
					case <-watchDone:
						return
					case <-time.After(5 * time.Millisecond):
					}
					if cut.handedOver() {
						err := cut.Health(context.Background())
						handedOver.CompareAndSwap(nil, &err)
					}
				}
			}()
			healthy := e.relay(brokerPublisher(t), cfg("healthy"))
			start(t, healthy)
			e.waitEven([]string{"cut-off", "healthy"}, waitFor, "two relays")

			// Keyed rows in every bucket, and as many without a key.
			const n = 160
			e.enqueue(n, func(i int) *txmsg.Message {
				m := &txmsg.Message{Topic: e.topic, Body: fmt.Appendf(nil, "row-%d", i)}
				if i%2 == 0 {
					m.ShardingKey = fmt.Sprintf("key-%d", i)
				}
				return m
			})
			var buckets []int
			require.NoError(t, e.db.Table(e.ob.Table()).Distinct("bucket").Order("bucket").Pluck("bucket", &buckets).Error)
			require.Len(t, buckets, DefaultBuckets, "rows in every bucket")

			require.Eventually(t, func() bool { return e.stats().Sent == n }, time.Minute, 50*time.Millisecond,
				"the cut-off relay's rows are published by the other relay")
			require.Eventually(t, func() bool { return obs.Distinct() == n }, time.Minute, 50*time.Millisecond)
			require.Zero(t, e.stats().Parked)
			require.Eventually(t, func() bool { return handedOver.Load() != nil }, waitFor, tick, "the cut-off relay never handed its buckets over")
			err := *handedOver.Load()
			require.ErrorIs(t, err, txmsg.ErrUnavailable, "the cut-off relay is not healthy")
			require.True(t, strings.Contains(err.Error(), "handed its buckets"), err.Error())
			require.NoError(t, healthy.Health(context.Background()))

			// Back on the broker, the relay takes its share again.
			route.Store(brokerPublisher(t))
			e.waitEven([]string{"cut-off", "healthy"}, time.Minute, "the relay back on the broker")
			e.enqueue(n, func(i int) *txmsg.Message {
				return &txmsg.Message{Topic: e.topic, Body: fmt.Appendf(nil, "more-%d", i)}
			})
			require.Eventually(t, func() bool { return e.stats().Sent == 2*n }, time.Minute, 50*time.Millisecond)
			require.Eventually(t, func() bool { return cut.Health(context.Background()) == nil }, waitFor, tick)
		})
	}
}

// handedOver reports whether r has handed its buckets over for being cut
// off from the broker, as Health shows it.
func (r *Relay) handedOver() bool {
	o := r.unavailable.Load()
	return o != nil && !o.rejoin.IsZero()
}

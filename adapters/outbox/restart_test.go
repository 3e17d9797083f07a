package outbox

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestBrokerRestartWaitingRowsGoOutAtOnce: the broker is SIGKILLed while
// two relays publish (through txrmq.Publishers that learn their topic from
// what they send), kept down while rows keep coming until the per-cycle
// backoff of waiting rows has grown past a minute, and started again.
//
//   - capped (unordered, MaxBackoff 5 min, MaxWaitBackoff left at its
//     default): no row that waits for the broker is ever set to wait
//     longer than MaxWaitBackoff after its last attempt. Before, the
//     backoff grew with each failed cycle towards MaxBackoff, so after an
//     outage of a minute the rows waited minutes more.
//   - signalled (ordered, MaxWaitBackoff 5 min): the writes stop before
//     the broker returns, so no row is due and only the publisher's
//     signal of the broker's return can make the relay try again. Every
//     row still waiting, at the restart, for a moment after the broker
//     was back is published before that moment: the relay retried it at
//     once. Each key keeps its order.
//
// It needs a broker of its own (testbed.BrokerRestartEnv) and takes under a
// minute (20–35 s on the test machine); it is not parallel, so no other test of the package runs while
// the broker is down.
func TestBrokerRestartWaitingRowsGoOutAtOnce(t *testing.T) {
	testbed.RequireRestartableBroker(t)
	capped, signalled := brokerEnv(t), brokerEnv(t)
	obs := testbed.Observe(t, signalled.topic, nil)
	const fixedKeys = 4
	cappedCfg := RelayConfig{Name: "capped", MinBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Minute}
	cappedRelay := capped.relay(brokerPublisher(t), cappedCfg)
	require.Equal(t, DefaultMaxWaitBackoff, cappedRelay.cfg.MaxWaitBackoff)
	start(t, cappedRelay)
	start(t, signalled.relay(brokerPublisher(t), RelayConfig{
		Name: "signalled", Ordered: true,
		MinBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Minute, MaxWaitBackoff: 5 * time.Minute,
	}))

	seq := make([]int, fixedKeys)
	sendFixed := func(k int) {
		signalled.sendKeyed(fmt.Sprintf("k%d", k), seq[k])
		seq[k]++
	}
	for k := range fixedKeys {
		sendFixed(k)
	}
	capped.send(5, "before")
	require.Eventually(t, func() bool {
		return capped.stats().Sent == 5 && signalled.stats().Sent == fixedKeys
	}, time.Minute, 50*time.Millisecond)
	// The publishers look up the brokers of a topic they sent to at their
	// next 500 ms tick; only then do they watch them.
	time.Sleep(time.Second)

	testbed.KillBroker(t)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			testbed.StartBroker(t)
		}
	})

	// Rows keep coming: unkeyed ones, which the ordered relay tries in
	// every cycle, so that its backoff grows, and rows of the fixed keys,
	// which wait behind their first.
	var wg sync.WaitGroup
	stopWrites := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopWrites:
				return
			case <-time.After(200 * time.Millisecond):
			}
			noop := func(context.Context, *gorm.DB) error { return nil }
			for _, e := range []*env{capped, signalled} {
				m := &txmsg.Message{Topic: e.topic, Body: fmt.Appendf(nil, "during-%d", i)}
				if _, err := e.ob.Transact(context.Background(), m, noop); err != nil {
					t.Errorf("transact: %v", err)
				}
			}
			if i%5 == 0 {
				sendFixed(i / 5 % fixedKeys)
			}
		}
	}()

	// The capped relay's waiting rows, sampled throughout.
	var capMu sync.Mutex
	var overCap []string
	sampledWaiting := 0
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var rows []Row
			if err := capped.db.Table(capped.ob.Table()).Where("status = ? AND last_error LIKE ?", StatusPending, waitingPrefix+"%").
				Find(&rows).Error; err != nil {
				continue
			}
			capMu.Lock()
			sampledWaiting += len(rows)
			for _, r := range rows {
				if wait := r.NextAttemptAt.Sub(r.UpdatedAt); wait > DefaultMaxWaitBackoff+time.Millisecond {
					overCap = append(overCap, fmt.Sprintf("%s waits %s after its last attempt", r.MsgID, wait))
				}
			}
			capMu.Unlock()
		}
	}()

	// The outage lasts until the signalled relay's rows wait more than a
	// minute after their last attempt: what every relay did before
	// MaxWaitBackoff.
	longWait := func() bool {
		var n int64
		require.NoError(t, signalled.db.Table(signalled.ob.Table()).
			Where("status = ? AND last_error LIKE ? AND next_attempt_at > updated_at + INTERVAL 1 MINUTE", StatusPending, waitingPrefix+"%").
			Count(&n).Error)
		return n > 0
	}
	require.Eventually(t, longWait, 3*time.Minute, 100*time.Millisecond, "the waiting rows' backoff grows while the broker is away")
	close(stopWrites)
	wg.Wait()
	// Let the relays try the last rows written, so that none is due.
	time.Sleep(2 * time.Second)
	var before []Row
	require.NoError(t, signalled.db.Table(signalled.ob.Table()).Where("status = ? AND last_error LIKE ?", StatusPending, waitingPrefix+"%").
		Find(&before).Error)
	require.NotEmpty(t, before)
	require.EqualValues(t, fixedKeys, signalled.stats().Sent, "nothing is published while the broker is down")
	require.EqualValues(t, 5, capped.stats().Sent, "nothing is published while the broker is down")

	testbed.StartBroker(t)
	restarted = true
	back := time.Now().UTC()

	require.Eventually(t, func() bool { return signalled.stats().Pending == 0 }, 2*time.Minute, 50*time.Millisecond,
		"the signalled relay publishes the rows that wait minutes")
	require.Eventually(t, func() bool { return capped.stats().Pending == 0 }, 2*time.Minute, 50*time.Millisecond)
	close(stopSampling)
	<-sampled
	capMu.Lock()
	require.Empty(t, overCap, "no waiting row waits longer than MaxWaitBackoff")
	require.Positive(t, sampledWaiting, "rows were seen waiting")
	capMu.Unlock()
	for _, e := range []*env{capped, signalled} {
		s := e.stats()
		require.Zero(t, s.Parked)
		require.Zero(t, s.Waiting)
	}

	sentAt := map[int64]time.Time{}
	for _, r := range signalled.rows("") {
		require.NotNil(t, r.SentAt)
		sentAt[r.ID] = *r.SentAt
	}
	// A row due again within seconds of the return may go at its own
	// time: the publishers notice the return at their next look (500 ms
	// apart). The rows that matter wait minutes.
	const noticed = 5 * time.Second
	late := 0
	for _, r := range before {
		if !r.NextAttemptAt.After(back.Add(noticed)) {
			continue // it was due again about when the broker was back anyway
		}
		late++
		require.True(t, sentAt[r.ID].Before(r.NextAttemptAt),
			"%s was published at %s, not before its next attempt at %s that it was waiting for when the broker came back at %s",
			r.MsgID, sentAt[r.ID].Format(time.RFC3339Nano), r.NextAttemptAt.Format(time.RFC3339Nano), back.Format(time.RFC3339Nano))
	}
	require.Positive(t, late, "rows were waiting past the broker's return")

	n := len(signalled.rows(""))
	require.Eventually(t, func() bool { return obs.Distinct() == n }, 2*time.Minute, 100*time.Millisecond)
	requireKeysInOrder(t, obs, seq)
}

// requireKeysInOrder checks that each key k<i> of obs's messages was
// stored on one queue with the bodies k<i>:0 … k<i>:seq[i]-1 in that
// order.
func requireKeysInOrder(t *testing.T, obs *testbed.Observer, seq []int) {
	t.Helper()
	stored := obs.Order()
	sort.SliceStable(stored, func(i, j int) bool { return stored[i].QueueOffset < stored[j].QueueOffset })
	seen := map[string]bool{}
	queues := map[string]map[int]bool{}
	var msgs []*txmsg.Message
	for _, m := range stored {
		k := m.GetProperty(txmsg.PropertyShardingKey)
		id := m.GetProperty(txmsg.PropertyID)
		if k == "" || seen[id] {
			continue
		}
		seen[id] = true
		if queues[k] == nil {
			queues[k] = map[int]bool{}
		}
		queues[k][m.Queue.QueueId] = true
		msgs = append(msgs, &txmsg.Message{Body: m.Body, ShardingKey: k})
	}
	got := perKey(t, msgs)
	require.Len(t, got, len(seq))
	for i, n := range seq {
		k := fmt.Sprintf("k%d", i)
		require.Len(t, queues[k], 1, "all of %s on one queue", k)
		want := make([]int, n)
		for j := range want {
			want[j] = j
		}
		require.Equal(t, want, got[k], "stored order of %s", k)
	}
}

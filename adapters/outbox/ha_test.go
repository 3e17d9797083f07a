package outbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestHARelayKeepsGoingWithAMasterDown: on the HA form (make test-ha:
// two groups of a master and a slave, asynchronous or synchronous
// replication, or the controller's failover), the local-table relay
// publishes and a txrmq consumer with an inbox handles events while
// broker-a's master is SIGKILLed: the relay publishes every row committed
// during the outage (to broker-b, or to the master the controller
// elected) and the consumer handles it before the killed broker returns; after it returns, every
// committed row's event has been handled exactly once and nothing is
// pending.
func TestHARelayKeepsGoingWithAMasterDown(t *testing.T) {
	ha := testbed.RequireHAAny(t)
	group := ha.Masters[0].Name
	// broker-a, or its slave where the controller elected it earlier.
	dead := ha.Procs.MasterOf(group)
	e := brokerEnv(t)
	start(t, e.relay(brokerPublisher(t), RelayConfig{}))

	handled := startCounter(t, e)
	count := handled.count

	before := e.send(20, "before", withKeys)
	require.Eventually(t, func() bool { return count(before) == len(before) }, time.Minute, 100*time.Millisecond)

	ha.Kill(t, dead)
	t.Cleanup(func() { ha.Restore(t) })
	killedAt := time.Now()
	during := e.send(40, "during", withKeys)
	require.Eventually(t, func() bool { return count(during) == len(during) }, time.Minute, 100*time.Millisecond,
		"events committed while %s was down were not all handled (%d of %d)", dead, count(during), len(during))
	t.Logf("%s form: the 40 events committed with %s down handled %s after the kill",
		ha.Replication, dead, time.Since(killedAt).Round(100*time.Millisecond))
	ha.Start(t, dead)

	after := e.send(20, "after", withKeys)
	all := append(append(append([]string{}, before...), during...), after...)
	require.Eventually(t, func() bool { return count(all) == len(all) }, time.Minute, 100*time.Millisecond)
	require.Eventually(t, func() bool { return e.stats().Pending == 0 }, waitFor, tick)
	time.Sleep(2 * time.Second) // let a duplicate delivery, if any, be handled
	for _, id := range all {
		require.Equal(t, 1, handled.times(id), "%s handled %d times", id, handled.times(id))
	}
}

// counter is an inbox consumer of an env's topic that counts the
// handlings of each txmsg ID.
type counter struct {
	mu      sync.Mutex
	handled map[string]int
}

// startCounter starts a counter, closed when t ends.
func startCounter(t *testing.T, e *env) *counter {
	t.Helper()
	h := &counter{handled: map[string]int{}}
	inbox, err := txmsg.NewInbox(e.db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(context.Background()))
	c, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[[]byte]{Name: e.topic, Codec: rawCodec{}},
		func(_ context.Context, _ *gorm.DB, d txmsg.Delivery[[]byte]) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.handled[d.Message.ID]++
			return nil
		})}, txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "cg"),
		RetryDelayLevel: 1,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return h
}

// count returns how many of ids were handled at least once.
func (h *counter) count(ids []string) (n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if h.handled[id] > 0 {
			n++
		}
	}
	return n
}

// times returns how many times id was handled.
func (h *counter) times(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handled[id]
}

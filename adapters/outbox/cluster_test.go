package outbox

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestClusterRelayAndConsumerKeepGoingWithABrokerDown: on the two-broker
// cluster (make test-cluster), the local-table relay publishes and a
// txrmq consumer with an inbox handles events while broker-a is SIGKILLed:
// events committed during the outage are handled before broker-a returns;
// after it returns, every committed event has been handled exactly once.
func TestClusterRelayAndConsumerKeepGoingWithABrokerDown(t *testing.T) {
	brokers := testbed.RequireCluster(t)
	e := brokerEnv(t)
	start(t, e.relay(brokerPublisher(t), RelayConfig{}))

	handled := startCounter(t, e)
	count := handled.count

	before := e.send(20, "before", withKeys)
	require.Eventually(t, func() bool { return count(before) == len(before) }, time.Minute, 100*time.Millisecond)

	testbed.KillClusterBroker(t, brokers[0].Name)
	during := e.send(40, "during", withKeys)
	require.Eventually(t, func() bool { return count(during) == len(during) }, time.Minute, 100*time.Millisecond,
		"events committed while %s was down were not all handled (%d of %d)", brokers[0].Name, count(during), len(during))
	testbed.StartClusterBroker(t, brokers[0].Name)

	after := e.send(20, "after", withKeys)
	all := append(append(append([]string{}, before...), during...), after...)
	require.Eventually(t, func() bool { return count(all) == len(all) }, time.Minute, 100*time.Millisecond)
	require.Eventually(t, func() bool { return e.stats().Pending == 0 }, waitFor, tick)
	for _, id := range all {
		require.Equal(t, 1, handled.times(id), "%s handled %d times", id, handled.times(id))
	}
}

// withKeys gives each message its own sharding key, so that the events
// spread over the queues of both brokers.
func withKeys(m *txmsg.Message) { m.ShardingKey = fmt.Sprintf("k-%s", m.Body) }

// rawCodec hands the body over as it is.
type rawCodec struct{}

func (rawCodec) Encode(b []byte) ([]byte, error) { return b, nil }
func (rawCodec) Decode(b []byte) ([]byte, error) { return b, nil }

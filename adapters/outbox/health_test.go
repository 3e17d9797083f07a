package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/txmsg"
)

// TestRelayHealth checks each way a relay is unhealthy: not running, a
// pending row older than MaxLag, a database that does not answer. (A
// broker that is unavailable: TestRelayBrokerOutage.)
func TestRelayHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	pub := newMemPublisher()
	pub.setFail(func(*txmsg.Message) error { return fmt.Errorf("%w: refused", txmsg.ErrRejected) })
	r := e.relay(pub, RelayConfig{MaxLag: time.Minute, MaxAttempts: -1})
	require.ErrorIs(t, r.Health(ctx), txmsg.ErrNotStarted)

	rr := start(t, r)
	require.Eventually(t, func() bool { return r.Health(ctx) == nil }, waitFor, tick, "running, nothing pending")
	ids := e.send(1, "lagging")
	require.NoError(t, r.Health(ctx), "a young pending row is no lag")
	require.NoError(t, e.db.Table(e.ob.Table()).Where("msg_id = ?", ids[0]).
		Update("created_at", time.Now().UTC().Add(-10*time.Minute)).Error)
	err := r.Health(ctx)
	require.ErrorIs(t, err, ErrLagging)
	require.ErrorContains(t, err, "10m0s old")

	off := e.relay(pub, RelayConfig{MaxLag: -1, Name: "lag-check-off"})
	start(t, off)
	require.Eventually(t, func() bool { return off.Health(ctx) == nil }, waitFor, tick, "a negative MaxLag turns the lag check off")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorContains(t, r.Health(cancelled), "database")

	require.NoError(t, rr.stop(t))
	require.ErrorIs(t, r.Health(ctx), txmsg.ErrNotStarted)
}

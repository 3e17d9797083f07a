package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRelaysShowsTheFleet: two relays share a table; one cannot reach the
// broker (its name server is at 127.0.0.1:1) and does not hand its buckets
// over. Any process reading Outbox.Relays sees that relay failing, with
// since when and its broker error, while the other is live, each with the
// buckets it holds.
func TestRelaysShowsTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	start(t, e.relay(brokerPublisher(t), RelayConfig{Name: "fleet-ok", LeaseTTL: 2 * time.Second}))
	start(t, e.relay(publisherAt(t, "127.0.0.1:1"), RelayConfig{Name: "fleet-cut-off", LeaseTTL: 2 * time.Second, HandOverAfter: -1}))
	e.waitEven([]string{"fleet-ok", "fleet-cut-off"}, 20*time.Second, "two relays")
	e.send(40, "fleet")

	var ok, bad RelayStatus
	require.Eventually(t, func() bool {
		rs, err := e.ob.Relays(ctx)
		require.NoError(t, err)
		ok, bad = RelayStatus{}, RelayStatus{}
		for _, r := range rs {
			switch r.Name {
			case "fleet-ok":
				ok = r
			case "fleet-cut-off":
				bad = r
			}
		}
		return ok.State == RelayLive && bad.State == RelayFailing
	}, 60*time.Second, 200*time.Millisecond, "never saw fleet-cut-off failing and fleet-ok live: %+v %+v", ok, bad)
	require.NotEmpty(t, ok.Buckets)
	require.NotEmpty(t, bad.Buckets)
	require.Empty(t, ok.LastError)
	require.True(t, ok.UnavailableSince.IsZero())
	require.NotEmpty(t, bad.LastError)
	require.LessOrEqual(t, len(bad.LastError), 1024)
	require.False(t, bad.UnavailableSince.IsZero())
	require.Less(t, bad.Age, 2*time.Second)
	require.Equal(t, 2*time.Second, bad.LeaseTTL)
}

// TestRelaysStale: a relay-table row not renewed within its relay's
// LeaseTTL, by the database's clock, is stale.
func TestRelaysStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	require.NoError(t, e.db.Exec("INSERT INTO `"+DefaultTable+relaySuffix+"` (name, seen_at, lease_ttl_us) VALUES ('gone', DATE_SUB(UTC_TIMESTAMP(6), INTERVAL 5 SECOND), 1000000)").Error)
	rs, err := e.ob.Relays(ctx)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, RelayStale, rs[0].State)
	require.GreaterOrEqual(t, rs[0].Age, 5*time.Second)
}

// TestMigrateAddsRelayHealthColumns: a relay table of an earlier release
// (name and seen_at only) gets the health columns from Migrate, and a
// relay running on it before Migrate still registers.
func TestMigrateAddsRelayHealthColumns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	table := DefaultTable + relaySuffix
	require.NoError(t, e.db.Migrator().DropTable(table))
	require.NoError(t, e.db.Exec("CREATE TABLE `"+table+"` (`name` varbinary(255) NOT NULL, `seen_at` datetime(6) NOT NULL, PRIMARY KEY (`name`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4").Error)
	start(t, e.relay(newMemPublisher(), RelayConfig{Name: "old-table", LeaseTTL: time.Second}))
	require.Eventually(t, func() bool {
		ms, err := e.ob.Members(ctx)
		require.NoError(t, err)
		return len(ms) == 1
	}, 10*time.Second, tick, "the relay registers in a relay table without the health columns")
	require.NoError(t, e.ob.Migrate(ctx))
	for _, col := range []string{"lease_ttl_us", "unavailable_since", "last_error"} {
		require.True(t, e.db.Migrator().HasColumn(table, col), col)
	}
	require.Eventually(t, func() bool {
		rs, err := e.ob.Relays(ctx)
		require.NoError(t, err)
		return len(rs) == 1 && rs[0].LeaseTTL == time.Second && rs[0].State == RelayLive
	}, 10*time.Second, tick, "the relay writes its health once the columns exist")
}

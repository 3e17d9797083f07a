package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
)

// relays merges the lease table and the relay table: a relay that holds
// no bucket yet still shows with its last lease round, a lease holder
// missing from the relay table (a relay from before the table) still
// shows, and expired or ownerless buckets are free.
func TestRelaysMergesLeasesAndMembers(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	leases := []outbox.Lease{
		{Bucket: 0, Owner: "a", ExpiresAt: now.Add(3 * time.Second)},
		{Bucket: 1, Owner: "a", ExpiresAt: now.Add(2 * time.Second), WantedBy: "b"},
		{Bucket: 2, Owner: "old", ExpiresAt: now.Add(time.Second)},
		{Bucket: 3, Owner: "gone", ExpiresAt: now.Add(-time.Second)},
		{Bucket: 4},
	}
	members := []outbox.RelayStatus{
		{Name: "b", SeenAt: now.Add(-500 * time.Millisecond), State: outbox.RelayFailing, UnavailableSince: now.Add(-time.Minute), LastError: "no route"},
		{Name: "a", SeenAt: now.Add(-time.Second), State: outbox.RelayLive},
	}
	got, free := relays(leases, members, now)
	require.Equal(t, []int{3, 4}, free)
	require.Equal(t, []relayView{
		{Name: "a", Buckets: []int{0, 1}, Expires: now.Add(2 * time.Second), Wanted: []int{1}, Seen: now.Add(-time.Second), State: outbox.RelayLive},
		{Name: "b", Seen: now.Add(-500 * time.Millisecond), State: outbox.RelayFailing, Err: "no route", Since: now.Add(-time.Minute)},
		{Name: "old", Buckets: []int{2}, Expires: now.Add(time.Second), State: outbox.RelayLive},
	}, got)
}

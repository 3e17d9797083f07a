package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
)

// A relay that asked for a bucket and then died must not count as live
// forever: its ask would shrink the fair share of the live relays, and the
// buckets it held would stay unowned after its leases expired, their rows
// never published. (Found by the chaos suite: a relay SIGKILLed while its
// ask was pending.)
func TestOrderedRelayIgnoresDeadRelaysAsk(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()

	// One pending row per bucket.
	have := map[int]bool{}
	for i := 0; len(have) < DefaultBuckets && i < 1000; i++ {
		key := fmt.Sprintf("key-%d", i)
		b := bucketOf(key, DefaultBuckets)
		if have[b] {
			continue
		}
		have[b] = true
		_, err := e.ob.Transact(ctx, e.msg(`{}`, withKey(key)), func(context.Context, *gorm.DB) error { return nil })
		require.NoError(t, err)
	}
	require.Len(t, have, DefaultBuckets)

	// Buckets 0-7: held by the live relay, bucket 0 asked for by the dead
	// one long ago. Buckets 8-15: the dead relay's, expired.
	now := time.Now().UTC()
	for b := range DefaultBuckets {
		l := Lease{Bucket: b, Owner: "relay-live", ExpiresAt: now.Add(time.Minute), WantedAt: time.Unix(1, 0).UTC()}
		if b == 0 {
			l.WantedBy, l.WantedAt = "relay-dead", now.Add(-time.Minute)
		}
		if b >= DefaultBuckets/2 {
			l.Owner, l.ExpiresAt = "relay-dead", now.Add(-time.Minute)
		}
		require.NoError(t, e.db.Table(DefaultTable+leaseSuffix).Create(&l).Error)
	}

	pub := newMemPublisher()
	r, err := NewRelay(e.db, pub, RelayConfig{Name: "relay-live", Ordered: true, Logger: testLogger(t),
		PollInterval: 100 * time.Millisecond, LeaseTTL: 3 * time.Second, SettleDelay: time.Millisecond})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool { return len(e.rows("status = ?", StatusSent)) == DefaultBuckets }, 15*time.Second, 100*time.Millisecond,
		"the dead relay's expired buckets were never taken over")
	var ghost int64
	require.NoError(t, e.db.Table(DefaultTable+leaseSuffix).Where("wanted_by = ?", "relay-dead").Count(&ghost).Error)
	require.Zero(t, ghost, "the stale ask is cleared")
}

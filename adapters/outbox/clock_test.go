package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// bucketOwners returns the owner of each bucket whose lease is live.
func (e *env) bucketOwners() map[int]string {
	e.t.Helper()
	var leases []Lease
	require.NoError(e.t, e.db.Table(e.ob.Table()+leaseSuffix).Where("expires_at > UTC_TIMESTAMP(6)").Find(&leases).Error)
	out := map[int]string{}
	for _, l := range leases {
		if l.Owner != "" {
			out[l.Bucket] = l.Owner
		}
	}
	return out
}

// TestRelayClockAheadLeasesExpireOnTime: a relay whose clock runs 30 s
// ahead holds every bucket and is SIGKILLed. A relay with the right clock
// takes every bucket within a few lease TTLs of the kill, not after the
// skew: leases and the relay table use the database's clock.
func TestRelayClockAheadLeasesExpireOnTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	child := startKillChild(t, e, killChildSkew+"=30s")
	require.Eventually(t, func() bool { return e.owners()["child"] == DefaultBuckets }, time.Minute, tick,
		"the child relay takes every bucket")
	child.kill(t)
	start(t, e.relay(newMemPublisher(), RelayConfig{Name: "survivor", LeaseTTL: killChildTTL}))
	require.Eventually(t, func() bool { return e.owners()["survivor"] == DefaultBuckets }, 5*killChildTTL, tick,
		"the buckets of a relay whose clock ran ahead move within a few TTLs of its death")
}

// TestRelaysWithSkewedClocksKeepTheirBuckets: two relays whose clocks are
// 30 s apart share the buckets evenly, and each keeps its buckets round
// after round instead of taking the other's leases for expired.
func TestRelaysWithSkewedClocksKeepTheirBuckets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	const ttl = time.Second
	ahead := e.relay(newMemPublisher(), RelayConfig{Name: "ahead", LeaseTTL: ttl})
	ahead.now = func() time.Time { return time.Now().Add(30 * time.Second) }
	right := e.relay(newMemPublisher(), RelayConfig{Name: "right", LeaseTTL: ttl})
	start(t, ahead)
	start(t, right)
	e.waitEven([]string{"ahead", "right"}, 20*ttl, "relays 30 s apart")
	before := e.bucketOwners()
	relays := []*Relay{ahead, right}
	from := rounds(relays)
	require.Eventually(t, func() bool {
		now := rounds(relays)
		return now[0]-from[0] >= 6 && now[1]-from[1] >= 6
	}, 20*ttl, tick)
	require.Equal(t, before, e.bucketOwners(), "no bucket changed hands in six lease rounds of each relay")
}

// dsnIn is dsn with the driver's time zone (loc) set to zone.
func dsnIn(t *testing.T, dsn, zone string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.Loc, err = time.LoadLocation(zone)
	require.NoError(t, err)
	return cfg.FormatDSN()
}

// TestRelaysAndWritersInMixedTimeZones: a writer whose DSN reads and
// writes times in UTC+8 (loc=Asia/Shanghai, as loc=Local on a host in that
// zone) and relays with loc=UTC and loc=Asia/Shanghai, in both modes: no
// row is held back by the zone offset, and the relays keep their buckets.
func TestRelaysAndWritersInMixedTimeZones(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{})
			local, err := testbed.Open(dsnIn(t, e.dsn, "Asia/Shanghai"))
			require.NoError(t, err)
			t.Cleanup(func() {
				if sqlDB, err := local.DB(); err == nil {
					_ = sqlDB.Close()
				}
			})
			writer, err := New(local, Config{Logger: testLogger(t)})
			require.NoError(t, err)

			const ttl = time.Second
			pub := newMemPublisher()
			cfg := func(name string) RelayConfig {
				return RelayConfig{Name: name, Ordered: ordered, LeaseTTL: ttl, PollInterval: 50 * time.Millisecond,
					SettleDelay: time.Millisecond, Logger: testLogger(t)}
			}
			utc, err := NewRelay(e.ob, pub, cfg("utc"))
			require.NoError(t, err)
			east, err := NewRelay(writer, pub, cfg("east"))
			require.NoError(t, err)
			start(t, utc)
			start(t, east)
			e.waitEven([]string{"utc", "east"}, 20*ttl, "relays in two time zones")
			before := e.bucketOwners()

			const n = 64
			for i := range n {
				m := &txmsg.Message{Topic: e.topic, Body: fmt.Appendf(nil, "k%d:%d", i%8, i/8), ShardingKey: fmt.Sprintf("k%d", i%8)}
				_, err := writer.Transact(context.Background(), m, func(context.Context, *gorm.DB) error { return nil })
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { return e.stats().Sent == n }, 20*ttl, tick,
				"rows written in UTC+8 are published at once")
			require.Equal(t, before, e.bucketOwners(), "no bucket changed hands")
			if ordered {
				for k, seqs := range perKey(t, pub.published()) {
					require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, seqs, "order of %s", k)
				}
			}
		})
	}
}

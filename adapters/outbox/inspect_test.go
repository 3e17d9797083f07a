package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/txmsg"
)

// TestListFiltersAndPages: List keeps the rows matching status, topic,
// key (a word of keys, the txmsg ID or the sharding key; LIKE wildcards
// in the key match themselves only) and age, pages by primary key, and
// refuses bad filters; Get finds a row by txmsg ID or says there is none.
func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	ids := e.send(4, "l", func(m *txmsg.Message) { m.Keys = []string{"order-7", "cust%_1"} })
	other := e.send(1, "o", func(m *txmsg.Message) { m.Topic = "other_topic"; m.ShardingKey = "shard-9" })
	require.NoError(t, e.db.Table(e.ob.Table()).Where("msg_id = ?", ids[0]).
		Updates(map[string]any{"status": StatusParked, "created_at": time.Now().UTC().Add(-time.Hour)}).Error)

	list := func(f ListFilter) []string {
		rows, err := e.ob.List(ctx, f)
		require.NoError(t, err)
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = r.MsgID
		}
		return out
	}
	require.Equal(t, []string{ids[0]}, list(ListFilter{Status: StatusParked}))
	require.Equal(t, ids[1:], list(ListFilter{Status: StatusPending, Topic: e.topic}))
	require.Equal(t, ids, list(ListFilter{Key: "order-7"}))
	require.Equal(t, ids, list(ListFilter{Key: "cust%_1"}))
	require.Empty(t, list(ListFilter{Key: "cust%"}), "wildcards in a key match themselves only")
	require.Empty(t, list(ListFilter{Key: "order"}), "a key matches whole words")
	require.Equal(t, other, list(ListFilter{Key: "shard-9"}))
	require.Equal(t, []string{ids[2]}, list(ListFilter{Key: ids[2]}))
	require.Equal(t, []string{ids[0]}, list(ListFilter{OlderThan: 30 * time.Minute}))

	page1, err := e.ob.List(ctx, ListFilter{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page1, 2)
	require.Equal(t, []string{ids[2], ids[3], other[0]}, list(ListFilter{AfterID: page1[1].ID}))

	for _, bad := range []ListFilter{{Limit: -1}, {Limit: MaxListLimit + 1}, {OlderThan: -time.Second}, {Status: "lost"}} {
		_, err := e.ob.List(ctx, bad)
		require.ErrorIs(t, err, ErrBadFilter)
	}
	row, err := e.ob.Get(ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, StatusPending, row.Status)
	_, err = e.ob.Get(ctx, "no-such-id")
	require.ErrorIs(t, err, ErrNoRow)
}

// TestLeasesAndSentSince: Leases is empty until an ordered relay made the
// lease rows, then lists them by bucket; SentSince counts rows published
// after a time.
func TestLeasesAndSentSince(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Buckets: 4})
	ctx := context.Background()
	leases, err := e.ob.Leases(ctx)
	require.NoError(t, err)
	require.Empty(t, leases)

	before := time.Now().UTC().Add(-time.Second)
	ids := e.send(3, "s")
	pub := newMemPublisher()
	r := e.relay(pub, RelayConfig{Ordered: true, Name: "relay-leases"})
	rr := start(t, r)
	require.Eventually(t, func() bool { return pub.distinct() == len(ids) }, time.Minute, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		n, err := e.ob.SentSince(ctx, before)
		return err == nil && n == int64(len(ids))
	}, time.Minute, 50*time.Millisecond)
	n, err := e.ob.SentSince(ctx, time.Now().UTC().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, n)

	leases, err = e.ob.Leases(ctx)
	require.NoError(t, err)
	require.Len(t, leases, 4)
	for i, l := range leases {
		require.Equal(t, i, l.Bucket)
		require.Equal(t, "relay-leases", l.Owner)
	}
	require.NoError(t, rr.stop(t))
}

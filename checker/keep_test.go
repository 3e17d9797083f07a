package checker_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// With KeepMessages the barrier row keeps the whole message, and
// Committed pages through the window's committed rows.
func TestKeepMessagesRoundTripsThroughCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testbed.DB(t)
	keep, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(t, err)
	require.NoError(t, keep.Migrate(ctx))
	plain, err := checker.New(db, checker.Config{})
	require.NoError(t, err)

	var want []*txmsg.Message
	for i := range 5 {
		m := &txmsg.Message{ID: txmsg.NewID(), Topic: "orders", Tag: "created", Keys: []string{fmt.Sprintf("order-%d", i)},
			ShardingKey: "user-1", Body: []byte(fmt.Sprintf("{\"i\":%d}\n\x00binary", i)), Properties: map[string]string{"trace": "abc"}}
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return keep.BeginMessage(ctx, tx, m) }))
		want = append(want, m)
	}
	unkeptID := txmsg.NewID()
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		return plain.BeginMessage(ctx, tx, &txmsg.Message{ID: unkeptID, Topic: "orders", Body: []byte("x")})
	}))
	// A rolled-back ID is not an event.
	state, err := keep.Resolve(ctx, txmsg.NewID())
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)

	now, err := keep.Now(ctx)
	require.NoError(t, err)
	var got []*txmsg.Message
	unkept, after, pages := 0, "", 0
	for {
		msgs, next, n, err := keep.Committed(ctx, now.Add(-time.Minute), now.Add(time.Second), after, 2)
		require.NoError(t, err)
		got, unkept, pages = append(got, msgs...), unkept+n, pages+1
		if next == "" {
			break
		}
		after = next
	}
	require.Equal(t, 1, unkept)
	require.Equal(t, 4, pages, "6 rows in pages of 2, and the empty page that ends them")
	require.Len(t, got, len(want))
	for i, m := range want {
		require.Equal(t, m, got[i])
	}
	msgs, _, _, err := keep.Committed(ctx, now.Add(-time.Hour), now.Add(-time.Minute), "", 10)
	require.NoError(t, err)
	require.Empty(t, msgs, "the window bounds the rows")
}

// ForgetMessages clears the kept messages of old rows only, and keeps
// the rows.
func TestForgetMessagesKeepsTheRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testbed.DB(t)
	chk, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	var ids []string
	for range 5 {
		m := &txmsg.Message{ID: txmsg.NewID(), Topic: "orders", Body: []byte("x")}
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, m) }))
		ids = append(ids, m.ID)
	}
	require.NoError(t, db.Table(chk.Table()).Where("tx_id IN ?", [][]byte{[]byte(ids[0]), []byte(ids[1]), []byte(ids[2])}).
		Update("created_at", time.Now().UTC().Add(-time.Hour)).Error)
	now, _ := chk.Now(ctx)
	n, err := chk.ForgetMessages(ctx, time.Time{}, now.Add(-30*time.Minute), 2)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	msgs, _, unkept, err := chk.Committed(ctx, now.Add(-2*time.Hour), now.Add(time.Second), "", 10)
	require.NoError(t, err)
	require.Equal(t, 3, unkept)
	require.Len(t, msgs, 2)
	for _, id := range ids {
		state, err := chk.Lookup(ctx, id)
		require.NoError(t, err)
		require.Equal(t, checker.StateCommitted, state)
	}
}

// BenchmarkBegin measures a local transaction that writes only its
// barrier row, without and with KeepMessages, for 1 KiB and 16 KiB bodies.
func BenchmarkBegin(b *testing.B) {
	ctx := context.Background()
	db := testbed.DB(b)
	for _, c := range []struct {
		keep bool
		size int
	}{{false, 1024}, {true, 1024}, {true, 16 * 1024}} {
		body := bytes.Repeat([]byte("x"), c.size)
		keep := c.keep
		b.Run(fmt.Sprintf("keep=%v/body=%d", keep, c.size), func(b *testing.B) {
			chk, err := checker.New(db, checker.Config{KeepMessages: keep})
			require.NoError(b, err)
			require.NoError(b, chk.Migrate(ctx))
			for range b.N {
				m := &txmsg.Message{ID: txmsg.NewID(), Topic: "orders", Body: body}
				require.NoError(b, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, m) }))
			}
		})
	}
}

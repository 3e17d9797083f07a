package txmsg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// TestParkedSearchAndLookups: Parked filters by group, by key (a word of
// the keys or the txmsg ID) and by key and IDs together, and pages by
// primary key; ParkedMessage and Handled find one message's rows.
func TestParkedSearchAndLookups(t *testing.T) {
	t.Parallel()
	in, _ := newInbox(t)
	ctx := context.Background()
	park := func(group, id string, keys ...string) {
		r := &txmsg.Received{Message: &txmsg.Message{ID: id, Topic: "t_lookup", Keys: keys, Body: []byte("x")}, Attempt: 1}
		require.NoError(t, driver.Park(in, ctx, group, r, errors.New("cannot decode")))
	}
	park("g1", "id-1", "order-1", "cust_9")
	park("g2", "id-1", "order-1")
	park("g1", "id-2", "order-2")
	park("g1", "id-3")

	ids := func(q txmsg.ParkedFilter) []string {
		rows, err := in.Parked(ctx, q)
		require.NoError(t, err)
		var out []string
		for _, r := range rows {
			out = append(out, r.ConsumerGroup+"/"+r.MsgID)
		}
		return out
	}
	require.Equal(t, []string{"g1/id-1", "g2/id-1", "g1/id-2", "g1/id-3"}, ids(txmsg.ParkedFilter{}))
	require.Equal(t, []string{"g1/id-1", "g1/id-2", "g1/id-3"}, ids(txmsg.ParkedFilter{Group: "g1"}))
	require.Equal(t, []string{"g1/id-1", "g2/id-1"}, ids(txmsg.ParkedFilter{Key: "order-1"}))
	require.Equal(t, []string{"g1/id-1"}, ids(txmsg.ParkedFilter{Key: "cust_9"}))
	require.Empty(t, ids(txmsg.ParkedFilter{Key: "cust_"}))
	require.Equal(t, []string{"g1/id-3"}, ids(txmsg.ParkedFilter{Key: "id-3"}))
	first, err := in.Parked(ctx, txmsg.ParkedFilter{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"g1/id-2", "g1/id-3"}, ids(txmsg.ParkedFilter{AfterID: first[1].ID}))
	require.Equal(t, []string{"g2/id-1"}, ids(txmsg.ParkedFilter{AfterID: first[0].ID, Limit: 1}))
	require.Equal(t, []string{"g2/id-1"}, ids(txmsg.ParkedFilter{Key: "order-1", IDs: []string{"id-1", "id-2"}, Group: "g2"}))
	require.Empty(t, ids(txmsg.ParkedFilter{Key: "order-2", IDs: []string{"id-1"}}))

	row, err := in.ParkedMessage(ctx, "g2", "id-1")
	require.NoError(t, err)
	require.Equal(t, "order-1", row.Keys)
	_, err = in.ParkedMessage(ctx, "g2", "id-2")
	require.ErrorIs(t, err, txmsg.ErrNotParked)

	for _, g := range []string{"billing", "shipping"} {
		_, err := driver.Run(in, ctx, g, "t_lookup", "id-9", func(context.Context, *gorm.DB) error { return nil })
		require.NoError(t, err)
	}
	handled, err := in.Handled(ctx, "id-9")
	require.NoError(t, err)
	require.Len(t, handled, 2)
	require.Equal(t, "billing", handled[0].ConsumerGroup)
	none, err := in.Handled(ctx, "id-8")
	require.NoError(t, err)
	require.Empty(t, none)
}

package outbox

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
)

// TestPurgeParkedSparesRowRequeuedMidway: an operator requeues a parked row
// after PurgeParked has selected it and before it deletes it. The row is
// pending again and must be published, not deleted.
func TestPurgeParkedSparesRowRequeuedMidway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	ids := e.send(3, "race")
	past := time.Now().UTC().Add(-2 * time.Hour)
	require.NoError(t, e.db.Table(e.ob.Table()).Where("msg_id IN ?", ids).
		Updates(map[string]any{"status": StatusParked, "updated_at": past}).Error)

	// Between the purge's SELECT and its DELETE, the row is requeued
	// through the library, on another connection of the pool.
	var fired atomic.Bool
	require.NoError(t, e.db.Callback().Query().After("gorm:query").Register("test:requeue_midway", func(tx *gorm.DB) {
		if tx.Statement.Table == e.ob.Table() && fired.CompareAndSwap(false, true) {
			n, err := e.ob.Requeue(context.Background(), ids[1])
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
		}
	}))

	n, err := e.ob.PurgeParked(ctx, time.Hour, 0)
	require.NoError(t, err)
	require.True(t, fired.Load())
	require.EqualValues(t, 2, n)
	rows := e.rows("")
	require.Len(t, rows, 1)
	require.Equal(t, ids[1], rows[0].MsgID)
	require.Equal(t, StatusPending, rows[0].Status)
}

// TestListByIDsAndDeleteParked: List finds rows by txmsg ID in any status;
// DeleteParked deletes only the parked ones among the IDs.
func TestListByIDsAndDeleteParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	ids := e.send(3, "ops")
	require.NoError(t, e.db.Table(e.ob.Table()).Where("msg_id IN ?", ids[:2]).Update("status", StatusParked).Error)

	rows, err := e.ob.List(ctx, ListFilter{IDs: []string{ids[2], ids[0], "missing"}})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, ids[0], rows[0].MsgID, "in id order")
	require.Equal(t, StatusParked, rows[0].Status)
	require.Equal(t, StatusPending, rows[1].Status)
	rows, err = e.ob.List(ctx, ListFilter{Status: StatusParked})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, ids[:2], []string{rows[0].MsgID, rows[1].MsgID})
	rows, err = e.ob.List(ctx, ListFilter{Status: StatusParked, IDs: ids[1:]})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, ids[1], rows[0].MsgID)
	_, err = e.ob.List(ctx, ListFilter{IDs: make([]string, MaxListLimit+1)})
	require.ErrorIs(t, err, ErrBadFilter)

	n, err := e.ob.DeleteParked(ctx, ids...)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the pending row is not parked")
	left := e.rows("")
	require.Len(t, left, 1)
	require.Equal(t, ids[2], left[0].MsgID)
	n, err = e.ob.DeleteParked(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

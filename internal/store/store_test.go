package store

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/internal/testbed"
)

// afterSelect runs change once, right after PurgeBefore's first SELECT of
// table has returned its keys and before its DELETE: the moment a row can
// change under a purge. gorm callbacks belong to one *gorm.DB, so no other
// test sees it.
func afterSelect(t *testing.T, db *gorm.DB, table string, change func()) {
	t.Helper()
	var fired atomic.Bool
	require.NoError(t, db.Callback().Query().After("gorm:query").Register("test:after_select", func(tx *gorm.DB) {
		if tx.Statement.Table == table && tx.Error == nil && fired.CompareAndSwap(false, true) {
			change()
		}
	}))
	t.Cleanup(func() { require.True(t, fired.Load(), "the change between select and delete never ran") })
}

type purgeRow struct {
	ID        int64 `gorm:"primaryKey;autoIncrement"`
	Status    string
	UpdatedAt time.Time `gorm:"precision:6"`
}

func seed(t *testing.T, db *gorm.DB, n int, status string, at time.Time) {
	t.Helper()
	require.NoError(t, db.Table("purge_rows").AutoMigrate(&purgeRow{}))
	for range n {
		require.NoError(t, db.Table("purge_rows").Create(&purgeRow{Status: status, UpdatedAt: at}).Error)
	}
}

func remaining(t *testing.T, db *gorm.DB) map[int64]string {
	t.Helper()
	var rows []purgeRow
	require.NoError(t, db.Table("purge_rows").Order("id").Find(&rows).Error)
	out := map[int64]string{}
	for _, r := range rows {
		out[r.ID] = r.Status
	}
	return out
}

// TestPurgeBeforeRechecksStatusInDelete: a row whose status changes
// between the purge's SELECT and its DELETE (a dead outbox row requeued,
// from another connection) is not deleted.
func TestPurgeBeforeRechecksStatusInDelete(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	ctx := context.Background()
	old := time.Now().UTC().Add(-time.Hour)
	seed(t, db, 3, "dead", old)
	afterSelect(t, db, "purge_rows", func() {
		require.NoError(t, db.Exec("UPDATE purge_rows SET status = 'pending' WHERE id = 2").Error)
	})

	n, err := PurgeBefore(ctx, db, "purge_rows", "id", "updated_at", time.Now().UTC().Add(-time.Minute), 10,
		clause.Eq{Column: clause.Column{Name: "status"}, Value: "dead"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, map[int64]string{2: "pending"}, remaining(t, db), "the requeued row survives the purge")
}

// TestPurgeBeforeRechecksAgeInDelete: a row whose time column moves past
// the cutoff between the SELECT and the DELETE is not deleted.
func TestPurgeBeforeRechecksAgeInDelete(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	ctx := context.Background()
	seed(t, db, 3, "sent", time.Now().UTC().Add(-time.Hour))
	afterSelect(t, db, "purge_rows", func() {
		require.NoError(t, db.Exec("UPDATE purge_rows SET updated_at = ? WHERE id = 3", time.Now().UTC()).Error)
	})

	n, err := PurgeBefore(ctx, db, "purge_rows", "id", "updated_at", time.Now().UTC().Add(-time.Minute), 10)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, map[int64]string{3: "sent"}, remaining(t, db), "the refreshed row survives the purge")
}

// TestPurgeBeforeBatches: every matching row goes, batch by batch, and
// the others stay.
func TestPurgeBeforeBatches(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	ctx := context.Background()
	seed(t, db, 7, "dead", time.Now().UTC().Add(-time.Hour))
	seed(t, db, 2, "pending", time.Now().UTC().Add(-time.Hour))
	seed(t, db, 2, "dead", time.Now().UTC())
	n, err := PurgeBefore(ctx, db, "purge_rows", "id", "updated_at", time.Now().UTC().Add(-time.Minute), 3,
		clause.Eq{Column: clause.Column{Name: "status"}, Value: "dead"})
	require.NoError(t, err)
	require.EqualValues(t, 7, n)
	left := remaining(t, db)
	require.Len(t, left, 4)
}

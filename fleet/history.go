package fleet

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
)

// DefaultHistoryTable is the default history table; its lease table is
// its name plus [HistoryLeaseSuffix].
const DefaultHistoryTable = "txmsg_history"

// HistoryLeaseSuffix names the history's lease table after the history
// table.
const HistoryLeaseSuffix = "_lease"

// Sample is one row of the history table, written by the one dashboard
// that holds the history lease every sample interval: what the fleet did
// during the Micros before At (the sum over every instance of the
// increase of its counters, see [Counts]; Published is the outbox rows the
// relays sent), and the depths at At.
type Sample struct {
	// At is when the sample was taken, by the database's clock.
	At time.Time `gorm:"precision:6;primaryKey;autoIncrement:false"`
	// Micros is how long the sample covers, in microseconds.
	Micros int64 `gorm:"column:span_us;not null"`
	// Sampler is the name of the dashboard that wrote the row.
	Sampler string `gorm:"type:varbinary(255);size:255;not null;default:''"`
	// Counts are the fleet's counts during the sample.
	Counts `gorm:"embedded"`
	// Published is the outbox rows sent during the sample.
	Published int64 `gorm:"not null;default:0"`
	// Pending and ParkedRows are the outbox's pending and parked rows at
	// At; Barrier is the barrier table's rows.
	Pending    int64 `gorm:"not null;default:0"`
	ParkedRows int64 `gorm:"not null;default:0"`
	Barrier    int64 `gorm:"not null;default:0"`
}

// HistoryLease is the one row of the history's lease table: which
// dashboard samples, until when (the database's clock).
type HistoryLease struct {
	Name      string    `gorm:"type:varbinary(64);size:64;primaryKey;not null"`
	Owner     string    `gorm:"type:varbinary(255);size:255;not null;default:''"`
	ExpiresAt time.Time `gorm:"precision:6;not null"`
}

// MigrateHistory creates the history table and its lease table, or adds
// the columns they lack. fleet.sql holds the same tables.
func MigrateHistory(ctx context.Context, db *gorm.DB, table string) error {
	if !store.ValidIdent(table) || !store.ValidIdent(table+HistoryLeaseSuffix) {
		return fmt.Errorf("%w: fleet: history table name %q must be a plain SQL identifier of at most %d characters",
			txmsg.ErrInvalidConfig, table, 64-len(HistoryLeaseSuffix))
	}
	for _, t := range []struct {
		name  string
		model any
	}{{table, &Sample{}}, {table + HistoryLeaseSuffix, &HistoryLease{}}} {
		if _, err := store.Migrate(ctx, store.Quiet(db), t.name, t.model); err != nil {
			return fmt.Errorf("fleet: migrate %s: %w", t.name, err)
		}
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// The workload's own tables, next to txmsg's in the run's database.
const (
	ordersTable  = "chaos_orders"
	effectsTable = "chaos_effects"
)

// Modes, as stored in the tables and named in the report.
const (
	modeTx     = "tx"
	modeOutbox = "outbox"
)

var modes = []string{modeTx, modeOutbox}

// orderRow is the business write of one transaction: its presence is the
// truth that the transaction committed.
type orderRow struct {
	ID        string    `gorm:"primaryKey;size:64"`
	Mode      string    `gorm:"size:8;not null"`
	ShardKey  string    `gorm:"size:64;not null"`
	Seq       int       `gorm:"not null"`
	Qty       int       `gorm:"not null"`
	CreatedAt time.Time `gorm:"precision:6;not null;autoCreateTime:false;index:idx_chaos_orders_created"`
}

// effectRow is the consumer's effect of one handled event. msg_id is not
// unique on purpose: a second application of an event must show up as a
// second row (I3), not as a constraint error.
type effectRow struct {
	ID             int64     `gorm:"primaryKey;autoIncrement"`
	MsgID          string    `gorm:"column:msg_id;size:64;not null;index:idx_chaos_effects_msg"`
	Mode           string    `gorm:"size:8;not null;index:idx_chaos_effects_fresh,priority:1"`
	ShardKey       string    `gorm:"size:64;not null"`
	Seq            int       `gorm:"not null"`
	OrderCreatedAt time.Time `gorm:"precision:6;not null;index:idx_chaos_effects_fresh,priority:2"`
	HandledAt      time.Time `gorm:"precision:6;not null"`
	// ReceivedAt is when the consumer received the delivery it handled;
	// DueAt the event's due time (txmsg.WithDelay), NULL for events sent
	// without a delay.
	ReceivedAt time.Time  `gorm:"precision:6"`
	DueAt      *time.Time `gorm:"precision:6"`
	Attempt    int        `gorm:"not null"`
	Pid        int        `gorm:"not null"`
}

// orderEvent is the event both modes publish.
type orderEvent struct {
	Mode string `json:"mode"`
	Key  string `json:"key"`
	Seq  int    `json:"seq"`
	Qty  int    `json:"qty"`
	// CreatedAt is when the producer began the transaction, in Unix
	// microseconds; recovery after a fault is measured on it.
	CreatedAt int64 `json:"created_at"`
}

func migrateWorkload(ctx context.Context, db *gorm.DB) error {
	if err := db.WithContext(ctx).Table(ordersTable).AutoMigrate(&orderRow{}); err != nil {
		return fmt.Errorf("migrate %s: %w", ordersTable, err)
	}
	if err := db.WithContext(ctx).Table(effectsTable).AutoMigrate(&effectRow{}); err != nil {
		return fmt.Errorf("migrate %s: %w", effectsTable, err)
	}
	return nil
}

package main

import "time"

// Order statuses. An order is pending from the moment it is committed until
// the inventory consumer decides it.
const (
	StatusPending   = "pending"
	StatusConfirmed = "confirmed"
	StatusRejected  = "rejected"
)

// Order is one row of the orders table.
type Order struct {
	ID       string `gorm:"primaryKey;size:36" json:"id"`
	UserID   string `gorm:"size:64;not null;index" json:"user_id"`
	SKU      string `gorm:"size:64;not null" json:"sku"`
	Quantity int    `gorm:"not null" json:"quantity"`
	Status   string `gorm:"size:16;not null;index" json:"status"`
	// EventID is the txmsg ID of the order's OrderCreated event: search
	// for it in the broker's console, the inbox or the outbox.
	EventID   string    `gorm:"size:36;not null" json:"event_id"`
	CreatedAt time.Time `gorm:"precision:6" json:"created_at"`
	UpdatedAt time.Time `gorm:"precision:6" json:"updated_at"`
}

// StockItem is one row of the inventory table: the units of a SKU left.
type StockItem struct {
	SKU       string    `gorm:"primaryKey;size:64" json:"sku"`
	Stock     int       `gorm:"not null" json:"stock"`
	UpdatedAt time.Time `gorm:"precision:6" json:"updated_at"`
}

// TableName keeps the table named after what it holds.
func (StockItem) TableName() string { return "inventory" }

// Deduction records that an order's units were taken from stock. The
// unique order_id makes a second deduction for one order impossible, even
// if the inbox were bypassed.
type Deduction struct {
	ID        int64     `gorm:"primaryKey;autoIncrement"`
	OrderID   string    `gorm:"size:36;not null;uniqueIndex"`
	SKU       string    `gorm:"size:64;not null;index"`
	Quantity  int       `gorm:"not null"`
	CreatedAt time.Time `gorm:"precision:6"`
}

// OrderCreated is the event published, atomically with the orders row,
// when an order is placed.
type OrderCreated struct {
	OrderID   string    `json:"order_id"`
	UserID    string    `json:"user_id"`
	SKU       string    `json:"sku"`
	Quantity  int       `json:"quantity"`
	CreatedAt time.Time `json:"created_at"`
}

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/txmsg"
)

// seedStock is the inventory the service starts with on an empty database.
var seedStock = []StockItem{
	{SKU: "apple", Stock: 150},
	{SKU: "pear", Stock: 100},
	{SKU: "plum", Stock: 60},
	{SKU: "fig", Stock: 30},
}

// Inventory owns the stock: it reads it for the API and, as the consumer
// of OrderCreated, takes each order's units from it.
type Inventory struct {
	db *gorm.DB
}

// NewInventory returns an Inventory over db.
func NewInventory(db *gorm.DB) *Inventory { return &Inventory{db: db} }

// Seed inserts seedStock; SKUs already present keep their stock, so
// restarts do not refill the shelves.
func (inv *Inventory) Seed(ctx context.Context) error {
	items := append([]StockItem(nil), seedStock...)
	now := time.Now().UTC()
	for i := range items {
		items[i].UpdatedAt = now
	}
	if err := inv.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&items).Error; err != nil {
		return fmt.Errorf("seed inventory: %w", err)
	}
	return nil
}

// Get returns the stock of sku, or ErrNotFound.
func (inv *Inventory) Get(ctx context.Context, sku string) (*StockItem, error) {
	var item StockItem
	err := inv.db.WithContext(ctx).Where("sku = ?", sku).Take(&item).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read stock of %s: %w", sku, err)
	}
	return &item, nil
}

// List returns every SKU's stock, by SKU.
func (inv *Inventory) List(ctx context.Context) ([]StockItem, error) {
	var items []StockItem
	if err := inv.db.WithContext(ctx).Order("sku").Find(&items).Error; err != nil {
		return nil, fmt.Errorf("list inventory: %w", err)
	}
	return items, nil
}

// OnOrderCreated is the txmsg.Handler of OrderCreated. It runs inside the
// transaction in which the inbox records the event, so everything here
// happens exactly once per order, or not at all and the broker delivers
// the event again.
//
// The conditional UPDATE takes the units only if enough are left; the
// order is then confirmed with a deduction row, or rejected and nothing
// else happens.
func (inv *Inventory) OnOrderCreated(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[OrderCreated]) error {
	e := d.Event
	tx = tx.WithContext(ctx)
	status := StatusRejected
	if e.Quantity > 0 {
		res := tx.Model(&StockItem{}).
			Where("sku = ? AND stock >= ?", e.SKU, e.Quantity).
			Update("stock", gorm.Expr("stock - ?", e.Quantity))
		if res.Error != nil {
			return fmt.Errorf("take %d of %s for order %s: %w", e.Quantity, e.SKU, e.OrderID, res.Error)
		}
		if res.RowsAffected == 1 {
			if err := tx.Create(&Deduction{OrderID: e.OrderID, SKU: e.SKU, Quantity: e.Quantity}).Error; err != nil {
				return fmt.Errorf("record deduction for order %s: %w", e.OrderID, err)
			}
			status = StatusConfirmed
		}
	}
	res := tx.Model(&Order{}).Where("id = ? AND status = ?", e.OrderID, StatusPending).Update("status", status)
	if res.Error != nil {
		return fmt.Errorf("set order %s %s: %w", e.OrderID, status, res.Error)
	}
	if res.RowsAffected != 1 {
		// The event exists only if the order committed, and the inbox runs
		// this once; failing rolls the deduction back and leaves the event
		// to the broker's retries and then its dead-letter topic %DLQ%<group>.
		return fmt.Errorf("order %s is missing or not pending", e.OrderID)
	}
	return nil
}

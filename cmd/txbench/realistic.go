package main

import (
	"context"
	"fmt"

	"gorm.io/gorm"
)

// The realistic business transaction of B0r-B3r: an order with three lines
// and one stock update, five statements, as a shop's checkout writes them.

// orderLine is one line of an order.
type orderLine struct {
	ID         int64  `gorm:"primaryKey;autoIncrement"`
	OrderNo    string `gorm:"size:64;not null;index"`
	LineNo     int    `gorm:"not null"`
	SKU        string `gorm:"size:64;not null"`
	Qty        int    `gorm:"not null"`
	PriceCents int64  `gorm:"not null"`
}

// stockLevel is the quantity on hand of one SKU.
type stockLevel struct {
	SKU    string `gorm:"primaryKey;size:64"`
	OnHand int64  `gorm:"not null"`
}

const (
	stockSKUs     = 50_000 // stock rows; newOrder picks among as many SKUs
	linesPerOrder = 3
)

// realisticTables creates the orders, order lines and stock tables and
// fills the stock once per run.
func (b *bench) realisticTables(ctx context.Context) error {
	if err := b.env.db.WithContext(ctx).AutoMigrate(&order{}, &orderLine{}, &stockLevel{}); err != nil {
		return err
	}
	var n int64
	if err := b.env.db.WithContext(ctx).Model(&stockLevel{}).Count(&n).Error; err != nil {
		return err
	}
	if n >= stockSKUs {
		return nil
	}
	rows := make([]stockLevel, 0, fillChunk)
	for i := range stockSKUs {
		rows = append(rows, stockLevel{SKU: fmt.Sprintf("SKU-%06d", i), OnHand: 1 << 40})
		if len(rows) == fillChunk || i == stockSKUs-1 {
			if err := b.env.db.WithContext(ctx).Create(&rows).Error; err != nil {
				return fmt.Errorf("fill stock: %w", err)
			}
			rows = rows[:0]
		}
	}
	return nil
}

// realisticWrite is the business function of B0r-B3r: the order, its three
// lines and the stock update of the order's SKU (a row lock on one of
// 50,000 rows, as concurrent checkouts of different products take).
func realisticWrite(o *order) func(ctx context.Context, tx *gorm.DB) error {
	return func(ctx context.Context, tx *gorm.DB) error {
		if err := tx.Create(o).Error; err != nil {
			return err
		}
		for i := range linesPerOrder {
			l := &orderLine{OrderNo: o.OrderNo, LineNo: i + 1, SKU: o.SKU, Qty: 1, PriceCents: o.AmountCents / linesPerOrder}
			if err := tx.Create(l).Error; err != nil {
				return err
			}
		}
		r := tx.Model(&stockLevel{}).Where("sku = ?", o.SKU).Update("on_hand", gorm.Expr("on_hand - ?", o.Qty))
		if r.Error != nil {
			return r.Error
		}
		if r.RowsAffected != 1 {
			return fmt.Errorf("stock of %s: %d rows updated", o.SKU, r.RowsAffected)
		}
		return nil
	}
}

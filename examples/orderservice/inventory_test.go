package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func TestOnOrderCreated(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	require.NoError(t, db.AutoMigrate(&Order{}, &StockItem{}, &Deduction{}))
	inv := NewInventory(db)
	require.NoError(t, db.Create(&StockItem{SKU: "fig", Stock: 5}).Error)

	handle := func(id string, qty int) error {
		return db.Transaction(func(tx *gorm.DB) error {
			return inv.OnOrderCreated(context.Background(), tx, txmsg.Delivery[OrderCreated]{
				Event: OrderCreated{OrderID: id, UserID: "u", SKU: "fig", Quantity: qty},
			})
		})
	}
	order := func(id string, qty int) {
		require.NoError(t, db.Create(&Order{ID: id, UserID: "u", SKU: "fig", Quantity: qty, Status: StatusPending, EventID: id}).Error)
	}
	status := func(id string) string {
		var o Order
		require.NoError(t, db.Take(&o, "id = ?", id).Error)
		return o.Status
	}
	stock := func() int {
		var s StockItem
		require.NoError(t, db.Take(&s, "sku = ?", "fig").Error)
		return s.Stock
	}

	order("o1", 3)
	require.NoError(t, handle("o1", 3))
	require.Equal(t, StatusConfirmed, status("o1"))
	require.Equal(t, 2, stock())

	order("o2", 3) // more than the 2 left
	require.NoError(t, handle("o2", 3))
	require.Equal(t, StatusRejected, status("o2"))
	require.Equal(t, 2, stock())

	// Handling o1 again (were the inbox bypassed) fails and changes
	// nothing: the deduction and the status update roll back together.
	require.Error(t, handle("o1", 1))
	require.Equal(t, 2, stock())
	var deductions int64
	require.NoError(t, db.Model(&Deduction{}).Count(&deductions).Error)
	require.EqualValues(t, 1, deductions)

	// An event without its order is an error, not a silent deduction.
	require.Error(t, handle("missing", 1))
	require.Equal(t, 2, stock())
}

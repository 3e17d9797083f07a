package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
)

// Errors of Orders. The API maps them to HTTP statuses.
var (
	// ErrInvalidOrder means the request broke a rule; nothing was written
	// or sent.
	ErrInvalidOrder = errors.New("invalid order")
	// ErrUnknownSKU means the SKU is not in the inventory; nothing was
	// written or sent.
	ErrUnknownSKU = errors.New("unknown sku")
	// ErrNotFound means there is no such order or SKU.
	ErrNotFound = errors.New("not found")
)

// Limits of a PlaceOrder request.
const (
	maxUserIDLen = 64
	maxSKULen    = 64
)

// PlaceOrder is the body of POST /orders.
type PlaceOrder struct {
	UserID   string `json:"user_id"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

func (p PlaceOrder) validate() error {
	switch {
	case p.UserID == "" || len(p.UserID) > maxUserIDLen:
		return fmt.Errorf("%w: user_id must be 1 to %d bytes", ErrInvalidOrder, maxUserIDLen)
	case p.SKU == "" || len(p.SKU) > maxSKULen:
		return fmt.Errorf("%w: sku must be 1 to %d bytes", ErrInvalidOrder, maxSKULen)
	case p.Quantity <= 0:
		return fmt.Errorf("%w: quantity must be positive, got %d", ErrInvalidOrder, p.Quantity)
	}
	return nil
}

// Orders places and reads orders. Placing an order writes the orders row
// and publishes OrderCreated in one step, through whichever Transactor the
// mode wired in: the code here is the same in both modes.
type Orders struct {
	db     *gorm.DB
	events *txmsg.Producer[OrderCreated]
}

// NewOrders returns Orders reading through db and publishing through
// events.
func NewOrders(db *gorm.DB, events *txmsg.Producer[OrderCreated]) *Orders {
	return &Orders{db: db, events: events}
}

// Place validates p and then, atomically, stores the order as pending and
// publishes its OrderCreated event. Whether there is enough stock is not
// checked here: the inventory consumer decides, and confirms or rejects the
// order.
//
// Errors: ErrInvalidOrder or ErrUnknownSKU when nothing was written or
// sent; otherwise the Transactor's error, for example one wrapping
// txmsg.ErrOutcomeUnknown when the commit's result was lost (the order then
// exists, and its event is published, if and only if the commit landed).
func (o *Orders) Place(ctx context.Context, p PlaceOrder) (*Order, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	var known int64
	if err := o.db.WithContext(ctx).Model(&StockItem{}).Where("sku = ?", p.SKU).Count(&known).Error; err != nil {
		return nil, fmt.Errorf("look up sku: %w", err)
	}
	if known == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownSKU, p.SKU)
	}

	now := time.Now().UTC()
	order := &Order{
		ID:        txmsg.NewID(),
		UserID:    p.UserID,
		SKU:       p.SKU,
		Quantity:  p.Quantity,
		Status:    StatusPending,
		EventID:   txmsg.NewID(),
		CreatedAt: now,
		UpdatedAt: now,
	}
	event := OrderCreated{OrderID: order.ID, UserID: order.UserID, SKU: order.SKU, Quantity: order.Quantity, CreatedAt: now}
	_, err := o.events.Send(ctx, event, func(ctx context.Context, tx *gorm.DB) error {
		return tx.Create(order).Error
	}, txmsg.WithID(order.EventID), txmsg.WithKeys(order.ID))
	if err != nil {
		return order, fmt.Errorf("place order %s: %w", order.ID, err)
	}
	return order, nil
}

// Get returns the order with id, or ErrNotFound.
func (o *Orders) Get(ctx context.Context, id string) (*Order, error) {
	var order Order
	err := o.db.WithContext(ctx).Where("id = ?", id).Take(&order).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read order %s: %w", id, err)
	}
	return &order, nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
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

// runB0r: the realistic business transaction alone.
func (b *bench) runB0r(ctx context.Context) error {
	if err := b.realisticTables(ctx); err != nil {
		return err
	}
	db := b.env.db
	res, err := closedLoop(ctx, b.progress, b.businessSpec("B0r"), func(ctx context.Context, seq int64) error {
		o, _ := newOrder(seq)
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return realisticWrite(o)(ctx, tx) })
	})
	if err != nil {
		return err
	}
	b.res.load("b0r", res)
	return nil
}

// runB1r: B0r, then a plain SendSync after the commit (unsafe).
func (b *bench) runB1r(ctx context.Context) error {
	if err := b.realisticTables(ctx); err != nil {
		return err
	}
	topic, err := b.env.topic(ctx, "b1r")
	if err != nil {
		return err
	}
	p, err := b.rawProducer("b1r")
	if err != nil {
		return err
	}
	defer func() { _ = p.Shutdown() }()
	db := b.env.db
	res, err := closedLoop(ctx, b.progress, b.businessSpec("B1r"), func(ctx context.Context, seq int64) error {
		o, evt := newOrder(seq)
		if err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return realisticWrite(o)(ctx, tx) }); err != nil {
			return err
		}
		body, err := json.Marshal(evt)
		if err != nil {
			return err
		}
		m := primitive.NewMessage(topic, body)
		m.WithKeys([]string{o.OrderNo})
		return sendRaw(ctx, p, m)
	})
	if err != nil {
		return err
	}
	b.res.load("b1r", res)
	return nil
}

// runB2r: the realistic transaction through transactional mode.
func (b *bench) runB2r(ctx context.Context) error {
	if err := b.realisticTables(ctx); err != nil {
		return err
	}
	topic, err := b.env.topic(ctx, "b2r")
	if err != nil {
		return err
	}
	chk, err := checker.New(b.env.db, checker.Config{Logger: b.log})
	if err != nil {
		return err
	}
	if err := chk.Migrate(ctx); err != nil {
		return err
	}
	tr, err := txrmq.NewTransactional(txrmq.TransactionalConfig{
		Config: txrmq.Config{NameServers: []string{b.cfg.NameServer}, Group: b.env.group("b2r"), Logger: b.log},
		Topics: []string{topic},
	}, b.env.db, chk)
	if err != nil {
		return err
	}
	if err := tr.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = tr.Close(context.WithoutCancel(ctx)) }()
	return b.sendWith(ctx, "B2r", tr, topic, realisticWrite)
}

// runB3r: the realistic transaction plus its outbox row, enqueue only.
func (b *bench) runB3r(ctx context.Context) error {
	if err := b.realisticTables(ctx); err != nil {
		return err
	}
	ob, err := outbox.New(b.env.db, outbox.Config{Table: "outbox_b3r", Logger: b.log})
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	defer b.env.dropTable(context.WithoutCancel(ctx), "outbox_b3r", "outbox_b3r_lease", "outbox_b3r_relay")
	return b.sendWith(ctx, "B3r", ob, "txbench_"+b.env.runID+"_b3r", realisticWrite)
}

// sendWith runs one business phase through a Transactor with the business
// function write makes for each order.
func (b *bench) sendWith(ctx context.Context, phase string, tr txmsg.Transactor, topic string,
	write func(*order) func(context.Context, *gorm.DB) error) error {
	orders, err := txmsg.NewProducer(tr, txmsg.Topic[OrderCreated]{Name: topic})
	if err != nil {
		return err
	}
	res, err := closedLoop(ctx, b.progress, b.businessSpec(phase), func(ctx context.Context, seq int64) error {
		o, evt := newOrder(seq)
		_, err := orders.Send(ctx, evt, write(o), txmsg.WithKeys(o.OrderNo))
		return err
	})
	if err != nil {
		return err
	}
	b.res.load(strings.ToLower(phase), res)
	return nil
}

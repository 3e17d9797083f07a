package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

// bench holds one run's state across phases.
type bench struct {
	cfg      *config
	log      *slog.Logger
	env      *env
	progress *progress
	res      *results
	// checkBacks counts the check-backs each transactional side (B2, F2
	// and their realistic pairs) was asked, by phase.
	checkBacks sync.Map // string → *atomic.Int64
}

// checkBackCounter is phase's check-back count.
func (b *bench) checkBackCounter(phase string) *atomic.Int64 {
	c, _ := b.checkBacks.LoadOrStore(strings.ToUpper(phase), new(atomic.Int64))
	return c.(*atomic.Int64)
}

// countCheckBacks is a txmsg hook that counts check-backs.
type countCheckBacks struct{ n *atomic.Int64 }

func (c countCheckBacks) OnCheckBack(string, string, string, txmsg.LocalState, error, time.Duration) {
	c.n.Add(1)
}

func (b *bench) phase(ctx context.Context, p string) error {
	switch p {
	case "business":
		return b.runBusiness(ctx, b.workload(""))
	case "business-r":
		return b.runBusiness(ctx, b.workload("r"))
	case "b4":
		return b.runB4(ctx)
	case "b5":
		return b.runB5(ctx)
	case "b6":
		return b.runB6(ctx)
	case "b7":
		return b.runB7(ctx)
	case "b8":
		return b.runB8(ctx)
	case "cost":
		return b.runCost(ctx)
	case "scale":
		return b.runScale(ctx)
	case "delay":
		return b.runDelay(ctx)
	}
	return fmt.Errorf("unknown phase %q", p)
}

// order is the business row every phase writes: an order with a unique
// order number, as a shop would keep it.
type order struct {
	ID          int64     `gorm:"primaryKey;autoIncrement"`
	OrderNo     string    `gorm:"size:64;not null;uniqueIndex"`
	CustomerID  int64     `gorm:"not null"`
	SKU         string    `gorm:"size:64;not null"`
	Qty         int       `gorm:"not null"`
	AmountCents int64     `gorm:"not null"`
	CreatedAt   time.Time `gorm:"precision:6;not null"`
}

// OrderCreated is the event of every phase: about 150 bytes of JSON.
type OrderCreated struct {
	OrderNo     string    `json:"order_no"`
	CustomerID  int64     `json:"customer_id"`
	SKU         string    `json:"sku"`
	Qty         int       `json:"qty"`
	AmountCents int64     `json:"amount_cents"`
	CreatedAt   time.Time `json:"created_at"`
}

func newOrder(seq int64) (*order, OrderCreated) {
	o := &order{
		OrderNo:     txmsg.NewID(),
		CustomerID:  seq % 10_000,
		SKU:         fmt.Sprintf("SKU-%06d", seq%50_000),
		Qty:         int(seq%5) + 1,
		AmountCents: 1999 + seq%1000,
		CreatedAt:   time.Now().UTC(),
	}
	return o, OrderCreated{OrderNo: o.OrderNo, CustomerID: o.CustomerID, SKU: o.SKU, Qty: o.Qty, AmountCents: o.AmountCents, CreatedAt: o.CreatedAt}
}

func (b *bench) ordersTable(ctx context.Context) error {
	return b.env.db.WithContext(ctx).AutoMigrate(&order{})
}

// workload is the business transaction of a phase: the minimal one (B0-B3,
// one INSERT) or the realistic one (B0r-B3r, five statements).
type workload struct {
	suffix string // "" or "r", appended to the phase names
	tables func(ctx context.Context) error
	write  func(o *order) func(ctx context.Context, tx *gorm.DB) error
}

// workload returns the business transaction of the phases with suffix
// ("" or "r").
func (b *bench) workload(suffix string) workload {
	if suffix == "r" {
		return workload{suffix: "r", tables: b.realisticTables, write: realisticWrite}
	}
	return workload{tables: b.ordersTable, write: minimalWrite}
}

// minimalWrite is the business function of B0-B3: the order row alone.
func minimalWrite(o *order) func(ctx context.Context, tx *gorm.DB) error {
	return func(_ context.Context, tx *gorm.DB) error { return tx.Create(o).Error }
}

// phase names phase base ("B0") with w's suffix: "B0" or "B0r".
func (w workload) phase(base string) string { return base + w.suffix }

// businessBases are the business phases of a group, without suffix.
var businessBases = []string{"b0", "b1", "b2", "b3", "f2", "f3"}

// runBusiness runs the enabled business phases of w as one interleaved
// group: B0-B3 and the floors F2 and F3, each side's producer, table and
// pool set up once and shared by its trials.
func (b *bench) runBusiness(ctx context.Context, w workload) error {
	if err := w.tables(ctx); err != nil {
		return err
	}
	var sides []side
	var closers []func()
	defer func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}()
	for _, base := range businessBases {
		id := base + w.suffix
		if !b.cfg.enabled(id) {
			continue
		}
		fn, closeFn, err := b.businessOp(ctx, w, base, id)
		if err != nil {
			return fmt.Errorf("%s: %w", strings.ToUpper(id), err)
		}
		closers = append(closers, closeFn)
		sides = append(sides, b.closedSide(strings.ToUpper(id), b.cfg.Workers, fn))
	}
	group := "business"
	if w.suffix != "" {
		group += "-" + w.suffix
	}
	runs, err := b.interleave(ctx, group, sides, b.cfg.Trial)
	if err != nil {
		return err
	}
	b.res.business(runs, w.suffix)
	// Check-backs cost the broker and the producer work that the
	// transactional sides' rates include: a side asked for many more
	// than its partner did not pay the same price per transaction.
	counts := map[string]int64{}
	for _, base := range []string{"b2", "f2"} {
		if id := base + w.suffix; b.cfg.enabled(id) {
			counts[strings.ToUpper(id)] = b.checkBackCounter(id).Load()
		}
	}
	if len(counts) > 0 {
		b.res.extra["check_backs_"+strings.ReplaceAll(group, "-", "_")] = counts
	}
	return nil
}

// businessOp sets up phase base of workload w (id is base with w's
// suffix) and returns its operation and what closes it.
func (b *bench) businessOp(ctx context.Context, w workload, base, id string) (op, func(), error) {
	nop := func() {}
	switch base {
	case "b0":
		return b.opB0(w), nop, nil
	case "b1":
		return b.opB1(ctx, w, id)
	case "b2":
		return b.opB2(ctx, w, id)
	case "b3":
		return b.opB3(ctx, w, id)
	case "f2":
		return b.opF2(ctx, w, id)
	case "f3":
		return b.opF3(ctx, w, id)
	}
	return nil, nop, fmt.Errorf("unknown business phase %q", base)
}

// opB0: the business transaction alone.
func (b *bench) opB0(w workload) op {
	db := b.env.db
	return func(ctx context.Context, seq int64) error {
		o, _ := newOrder(seq)
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return w.write(o)(ctx, tx) })
	}
}

// rawProducer starts a plain rocketmq-client-go producer with the client's
// defaults and a unique instance name, as a service that does not use
// txmsg would.
func (b *bench) rawProducer(purpose string) (rmq.Producer, error) {
	p, err := rmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.cfg.NameServer})),
		producer.WithGroupName(b.env.group(purpose)),
		producer.WithInstanceName(b.env.group(purpose)+"_"+txmsg.NewID()[24:]),
		producer.WithRetry(2),
	)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

func sendRaw(ctx context.Context, p rmq.Producer, m *primitive.Message) error {
	res, err := p.SendSync(ctx, m)
	if err != nil {
		return err
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("send status %d", res.Status)
	}
	return nil
}

// opB1: the naive, unsafe way: commit, then send with the raw client. A
// crash between the two loses the event; the phase measures what that
// shortcut costs, as the baseline of B2.
func (b *bench) opB1(ctx context.Context, w workload, id string) (op, func(), error) {
	topic, err := b.env.topic(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	p, err := b.rawProducer(id)
	if err != nil {
		return nil, nil, err
	}
	db := b.env.db
	fn := func(ctx context.Context, seq int64) error {
		o, evt := newOrder(seq)
		if err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return w.write(o)(ctx, tx) }); err != nil {
			return err
		}
		body, err := json.Marshal(evt)
		if err != nil {
			return err
		}
		m := primitive.NewMessage(topic, body)
		m.WithKeys([]string{o.OrderNo})
		return sendRaw(ctx, p, m)
	}
	return fn, func() { _ = p.Shutdown() }, nil
}

// opB2: txmsg's transactional mode: half message, local transaction with
// the barrier row and the business write, END_TRANSACTION.
func (b *bench) opB2(ctx context.Context, w workload, id string) (op, func(), error) {
	topic, err := b.env.topic(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	chk, err := checker.New(b.env.db, checker.Config{Logger: b.log})
	if err != nil {
		return nil, nil, err
	}
	if err := chk.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	tr, err := txrmq.NewTransactional(b.env.db, chk, txrmq.TransactionalConfig{
		Conn: txrmq.Conn{NameServers: []string{b.cfg.NameServer}, Logger: b.log}, Group: b.env.group(id),
		Topics: []string{topic},
		Hooks:  txmsg.Hooks{countCheckBacks{b.checkBackCounter(id)}},
	})
	if err != nil {
		return nil, nil, err
	}
	if err := tr.Start(ctx); err != nil {
		return nil, nil, err
	}
	closeFn := func() { _ = tr.Close(context.WithoutCancel(ctx)) }
	fn, err := sendOrders(w, tr, topic)
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return fn, closeFn, nil
}

// sendOrders is the operation of a phase through a Transactor: w's
// business write and its OrderCreated, sent with txmsg.Producer.Send.
func sendOrders(w workload, tr txmsg.Transactor, topic string) (op, error) {
	orders, err := txmsg.NewProducer(tr, txmsg.Topic[OrderCreated]{Name: topic})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, seq int64) error {
		o, evt := newOrder(seq)
		_, err := orders.Send(ctx, evt, w.write(o), txmsg.WithKeys(o.OrderNo))
		return err
	}, nil
}

// opB3: local-table mode, enqueue side only: the business write and its
// outbox row in one transaction. No relay runs, so the outbox grows by the
// phase's rows; B5 measures the relay side.
func (b *bench) opB3(ctx context.Context, w workload, id string) (op, func(), error) {
	table := "outbox_" + id
	ob, err := outbox.New(b.env.db, outbox.Config{Table: table, Logger: b.log})
	if err != nil {
		return nil, nil, err
	}
	if err := ob.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	closeFn := func() { b.env.dropTable(context.WithoutCancel(ctx), table, table+"_lease", table+"_relay") }
	fn, err := sendOrders(w, ob, "txbench_"+b.env.runID+"_"+id)
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return fn, closeFn, nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/txmsg"
)

// B8 compares the concurrent consumer (txrmq.Consumer) with the ordered
// one (txrmq.OrderedConsumer), each handling the same backlog with a
// handler that inserts one row in the inbox's transaction: once with
// every event under one sharding key (one queue) and once spread over
// consumeKeys keys (every queue).
const consumeKeys = 64

// consumeEffect is B8's handler write.
type consumeEffect struct {
	ID      int64  `gorm:"primaryKey;autoIncrement"`
	MsgID   string `gorm:"size:64;not null"`
	OrderNo string `gorm:"size:64;not null"`
}

func (consumeEffect) TableName() string { return "b8_effects" }

// consumedFunc is a txmsg.HookConsumed that calls itself with what the
// inbox decided.
type consumedFunc func(r *txmsg.Received, o txmsg.Outcome, err error)

// OnConsumed implements txmsg.HookConsumed.
func (f consumedFunc) OnConsumed(_ context.Context, _ string, r *txmsg.Received, o txmsg.Outcome, err error, _ time.Duration) {
	f(r, o, err)
}

// benchConsumer is what B8 needs of either consumer.
type benchConsumer interface {
	Start(ctx context.Context) error
	Close(ctx context.Context) error
}

func (b *bench) runB8(ctx context.Context) error {
	inbox, err := txmsg.NewInbox(b.env.db, txmsg.InboxConfig{Logger: b.log})
	if err != nil {
		return err
	}
	if err := inbox.Migrate(ctx); err != nil {
		return err
	}
	if err := b.env.db.WithContext(ctx).AutoMigrate(&consumeEffect{}); err != nil {
		return err
	}
	defer b.env.dropTable(context.WithoutCancel(ctx), "b8_effects", txmsg.DefaultInboxTable, txmsg.DefaultParkedTable)
	for _, c := range []struct {
		label, what string
		ordered     bool
		keys        int
	}{
		{"B8c1", "concurrent consumer, 1 key", false, 1},
		{"B8o1", "ordered consumer, 1 key", true, 1},
		{"B8cN", fmt.Sprintf("concurrent consumer, %d keys", consumeKeys), false, consumeKeys},
		{"B8oN", fmt.Sprintf("ordered consumer, %d keys", consumeKeys), true, consumeKeys},
	} {
		res, err := b.consume(ctx, c.label, c.ordered, c.keys)
		if err != nil {
			return fmt.Errorf("%s: %w", c.label, err)
		}
		res.What = fmt.Sprintf("%s, %d events", c.what, b.cfg.ConsumeCount)
		b.res.add(res)
		b.res.extra["consume_per_s_"+c.label] = res.Rate
	}
	if c, ok := b.res.extra["consume_per_s_B8cN"].(float64); ok && c > 0 {
		if o, ok := b.res.extra["consume_per_s_B8oN"].(float64); ok {
			b.res.extra["ratio_ordered_concurrent_many_keys"] = o / c
		}
	}
	return nil
}

// consume starts a consumer of a new group on a new topic, publishes
// ConsumeCount events over keys sharding keys as fast as the publisher
// goes, and measures from the first event handled to the last. Publishing
// in batches is many times faster than handling, so the consumer works
// through a backlog for nearly all of that time. Its inbox, on the tables
// runB8 created, reports each handled event to the measurement.
func (b *bench) consume(ctx context.Context, label string, ordered bool, keys int) (row, error) {
	purpose := "b8_" + label
	topic, err := b.env.topic(ctx, purpose)
	if err != nil {
		return row{}, err
	}
	n := int64(b.cfg.ConsumeCount)
	var handled atomic.Int64
	var first, last atomic.Int64 // unix nanoseconds
	var once sync.Once
	done := make(chan struct{})
	onProcessed := func(_ *txmsg.Received, o txmsg.Outcome, err error) {
		if err != nil || o != txmsg.OutcomeHandled {
			return
		}
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		last.Store(now)
		if handled.Add(1) == n {
			once.Do(func() { close(done) })
		}
	}
	inbox, err := txmsg.NewInbox(b.env.db, txmsg.InboxConfig{Logger: b.log, Hooks: txmsg.Hooks{consumedFunc(onProcessed)}})
	if err != nil {
		return row{}, err
	}
	route := txmsg.Handle(txmsg.Topic[OrderCreated]{Name: topic}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[OrderCreated]) error {
		return tx.Create(&consumeEffect{MsgID: d.Message.ID, OrderNo: d.Event.OrderNo}).Error
	})
	conn := txrmq.Conn{NameServers: []string{b.cfg.NameServer}, Logger: b.log}
	group := b.env.group(purpose)
	var c benchConsumer
	if ordered {
		c, err = txrmq.NewOrderedConsumer(inbox, []txmsg.Route{route}, txrmq.OrderedConsumerConfig{Conn: conn, Group: group})
	} else {
		c, err = txrmq.NewConsumer(inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{Conn: conn, Group: group})
	}
	if err != nil {
		return row{}, err
	}
	if err := c.Start(ctx); err != nil {
		return row{}, err
	}
	defer func() { _ = c.Close(context.WithoutCancel(ctx)) }()

	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{
		Conn: txrmq.Conn{NameServers: []string{b.cfg.NameServer}, Logger: b.log}, Group: b.env.group(purpose + "_pub"),
		Topics: []string{topic},
	})
	if err != nil {
		return row{}, err
	}
	if err := pub.Start(ctx); err != nil {
		return row{}, err
	}
	defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()

	stop := b.progress.ticker(label, func() string { return fmt.Sprintf("handled %d/%d", handled.Load(), n) }, handled.Load)
	cpu0 := cpuStart()
	const chunk = 256
	for i := int64(0); i < n; i += chunk {
		msgs := make([]*txmsg.Message, 0, chunk)
		for j := i; j < min(i+chunk, n); j++ {
			_, evt := newOrder(j)
			body, _ := json.Marshal(evt)
			msgs = append(msgs, &txmsg.Message{
				ID: txmsg.NewID(), Topic: topic, Body: body,
				ShardingKey: fmt.Sprintf("customer-%d", j%int64(keys)),
			})
		}
		if err := pub.Publish(ctx, msgs...); err != nil {
			stop()
			return row{}, fmt.Errorf("publish: %w", err)
		}
	}
	timeout := time.NewTimer(b.cfg.ConsumeTimeout)
	defer timeout.Stop()
	select {
	case <-done:
	case <-timeout.C:
	case <-ctx.Done():
	}
	stop()
	cpu := cpu0.stop(0)
	got := handled.Load()
	secs := time.Duration(last.Load() - first.Load()).Seconds()
	r := row{Phase: label, Unit: "msg/s", Ops: got, Secs: secs, CPU: cpu}
	if got > 1 && secs > 0 {
		r.Rate = float64(got-1) / secs
	}
	if got < n {
		r.Errors = n - got
		r.Note = fmt.Sprintf("only %d of %d handled within %s", got, n, b.cfg.ConsumeTimeout)
	}
	b.progress.printf("%-4s handled %d in %.1fs (%.0f msg/s)", label, got, secs, r.Rate)
	return r, nil
}

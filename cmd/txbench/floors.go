package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/txmsg"
)

// The floors: what the same work costs with nothing of txmsg's, so that a
// ratio to a floor says how far txmsg is from the physical limit, not from
// a cheaper but different design.
//
//	F2  rocketmq-client-go's own transactional producer: half message,
//	    the business write as the local transaction, a listener that
//	    returns COMMIT without any table, END_TRANSACTION
//	F3  the business transaction plus one INSERT of the same bytes into a
//	    table of the outbox's shape, as one literal statement (one round
//	    trip, as txmsg sends it), without txmsg

// opF2 is the floor of B2.
func (b *bench) opF2(ctx context.Context, w workload, id string) (op, func(), error) {
	topic, err := b.env.topic(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	l := &floorListener{db: b.env.db, pending: map[string]func(context.Context, *gorm.DB) error{}, errs: map[string]error{},
		checkBacks: b.checkBackCounter(id)}
	p, err := rmq.NewTransactionProducer(l,
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.cfg.NameServer})),
		producer.WithGroupName(b.env.group(id)),
		producer.WithInstanceName(b.env.group(id)+"_"+txmsg.NewID()[24:]),
		producer.WithRetry(2),
	)
	if err != nil {
		return nil, nil, err
	}
	if err := p.Start(); err != nil {
		return nil, nil, err
	}
	fn := func(ctx context.Context, seq int64) error {
		o, evt := newOrder(seq)
		body, err := json.Marshal(evt)
		if err != nil {
			return err
		}
		m := primitive.NewMessage(topic, body)
		m.WithKeys([]string{o.OrderNo})
		l.put(o.OrderNo, w.write(o))
		res, err := p.SendMessageInTransaction(ctx, m)
		lerr := l.take(o.OrderNo)
		if err != nil {
			return err
		}
		if lerr != nil {
			return lerr
		}
		if res.State != primitive.CommitMessageState {
			return fmt.Errorf("local transaction state %d", res.State)
		}
		return nil
	}
	return fn, func() { _ = p.Shutdown() }, nil
}

// floorListener runs F2's local transactions: the business write of the
// order named by the message's key, in a database transaction. Check-backs
// are answered COMMIT: the floor keeps no table to answer from.
type floorListener struct {
	db      *gorm.DB
	mu      sync.Mutex
	pending map[string]func(context.Context, *gorm.DB) error
	errs    map[string]error
	// checkBacks counts CheckLocalTransaction calls.
	checkBacks *atomic.Int64
}

func (l *floorListener) put(key string, write func(context.Context, *gorm.DB) error) {
	l.mu.Lock()
	l.pending[key] = write
	l.mu.Unlock()
}

// take returns the local transaction's error for key and forgets key.
func (l *floorListener) take(key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.errs[key]
	delete(l.errs, key)
	delete(l.pending, key)
	return err
}

// ExecuteLocalTransaction runs the business write of the message's order.
func (l *floorListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	key := m.GetKeys()
	l.mu.Lock()
	write := l.pending[key]
	l.mu.Unlock()
	err := errors.New("no business write for key " + key)
	if write != nil {
		ctx := context.Background()
		err = l.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return write(ctx, tx) })
	}
	if err != nil {
		l.mu.Lock()
		l.errs[key] = err
		l.mu.Unlock()
		return primitive.RollbackMessageState
	}
	return primitive.CommitMessageState
}

// CheckLocalTransaction answers COMMIT.
func (l *floorListener) CheckLocalTransaction(*primitive.MessageExt) primitive.LocalTransactionState {
	l.checkBacks.Add(1)
	return primitive.CommitMessageState
}

// opF3 is the floor of B3: the outbox row's bytes (the event's JSON as
// the body, its ID, topic and key) inserted by hand into a table created
// with the outbox's schema, in the business transaction.
func (b *bench) opF3(ctx context.Context, w workload, id string) (op, func(), error) {
	table := "floor_" + id
	ob, err := outbox.New(b.env.db, outbox.Config{Table: table, Logger: b.log})
	if err != nil {
		return nil, nil, err
	}
	if err := ob.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	closeFn := func() { b.env.dropTable(context.WithoutCancel(ctx), table, table+"_lease", table+"_relay") }
	topic := "txbench_" + b.env.runID + "_" + id
	db := b.env.db
	fn := func(ctx context.Context, seq int64) error {
		o, evt := newOrder(seq)
		body, err := json.Marshal(evt)
		if err != nil {
			return err
		}
		q := rawOutboxInsert(table, txmsg.NewID(), topic, o.OrderNo, rand.N(16), body)
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := w.write(o)(ctx, tx); err != nil {
				return err
			}
			return tx.Exec(q).Error
		})
	}
	return fn, closeFn, nil
}

// rawOutboxInsert is one pending outbox row as a literal INSERT, the body
// in hexadecimal: the statement txmsg sends, written by hand.
func rawOutboxInsert(table, msgID, topic, keys string, bucket int, body []byte) string {
	var q strings.Builder
	q.Grow(400 + 2*len(body))
	q.WriteString("INSERT INTO `" + table + "` (`msg_id`,`topic`,`tag`,`keys`,`sharding_key`,`bucket`,`body`,`properties`,`status`,`attempts`," +
		"`next_attempt_at`,`last_error`,`created_at`,`updated_at`,`sent_at`) VALUES (")
	fmt.Fprintf(&q, "%s,%s,'',%s,'',%d,X'%s','{}','pending',0,UTC_TIMESTAMP(6),'',UTC_TIMESTAMP(6),UTC_TIMESTAMP(6),NULL)",
		quote(msgID), quote(topic), quote(keys), bucket, hex.EncodeToString(body))
	return q.String()
}

// quote is s as a MySQL string literal.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// ErrNotInTransaction means [Outbox.EnqueueTx] was given a handle that is
// not inside a database transaction; nothing was written.
var ErrNotInTransaction = errors.New("outbox: EnqueueTx needs a handle inside a transaction (from db.Transaction or db.Begin)")

// insertChunkBytes bounds the bodies of one multi-row INSERT, well under
// MySQL's default max_allowed_packet.
const insertChunkBytes = 1 << 20

// Transact implements [txmsg.Transactor]: it runs local and inserts msg
// into the outbox in one database transaction, then wakes the relays.
//
// It validates first: a nil local returns txmsg.ErrNilLocalTx, a bad
// message an error wrapping txmsg.ErrInvalidMessage (and ErrBodyTooLarge or
// ErrInvalidTopic), a done ctx its error; in those cases nothing is written
// and the Receipt is nil. An empty msg.ID is filled in.
//
// When local fails or panics (as a *txmsg.PanicError) the transaction rolls
// back and the error comes with a Receipt in txmsg.StateRolledBack. A
// repeated ID fails with txmsg.ErrDuplicateID. When COMMIT itself fails its
// outcome is unknown: the error wraps txmsg.ErrOutcomeUnknown, the Receipt
// says txmsg.StateUnknown, and the message is published if and only if the
// commit landed.
//
// The transaction is a new one on the Outbox's db, never one the caller
// holds: inside an open transaction use EnqueueTx on that transaction
// instead of calling Transact.
func (o *Outbox) Transact(ctx context.Context, msg *txmsg.Message, local txmsg.LocalTx) (*txmsg.Receipt, error) {
	if local == nil {
		return nil, txmsg.ErrNilLocalTx
	}
	if msg != nil {
		driver.BeforeSend(o.cfg.Hooks, ctx, msg)
	}
	rows, err := o.prepare([]*txmsg.Message{msg})
	if err != nil {
		driver.InvalidSend(o.cfg.Hooks, ctx, msg, err)
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("outbox: transact: %w", err)
	}
	assignIDs([]*txmsg.Message{msg}, rows)
	receipt := &txmsg.Receipt{ID: msg.ID, State: txmsg.StateRolledBack}
	committing := false
	start := time.Now()
	err = o.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := driver.CallLocal(ctx, tx, local); err != nil {
			return err
		}
		// The row goes in last: its auto-increment id is the relay's order,
		// and the shorter the gap between taking the id and committing, the
		// closer id order is to commit order.
		if err := o.insert(ctx, tx, rows); err != nil {
			return err
		}
		committing = true
		return nil
	})
	switch {
	case err == nil:
		receipt.State = txmsg.StateCommitted
	case committing:
		receipt.State = txmsg.StateUnknown
		err = fmt.Errorf("%w: outbox: commit %s: %w", txmsg.ErrOutcomeUnknown, msg.ID, err)
	}
	// Hooks before the nudge: the relay may publish as soon as it wakes.
	driver.LocalDone(o.cfg.Hooks, ctx, msg, receipt.State, err, time.Since(start))
	if err != nil {
		return receipt, err
	}
	o.Notify()
	if o.log.Enabled(ctx, slog.LevelDebug) {
		o.log.Debug("message committed to the outbox", "txmsg_id", msg.ID, "topic", msg.Topic, "state", StatusPending)
	}
	return receipt, nil
}

// EnqueueTx inserts msgs into the outbox inside tx, a transaction the
// caller holds: they are published if and only if tx commits. Every message
// is validated before anything is written; when one is invalid, EnqueueTx
// writes nothing and returns an error wrapping txmsg.ErrInvalidMessage
// (with txmsg.ErrBodyTooLarge for an oversized body). Empty IDs are filled
// in. When EnqueueTx returns an error the caller should roll tx back.
//
// EnqueueTx does not wake the relays, because the rows become visible only
// when tx commits: call [Outbox.Notify] after the commit, or let the relays
// find them at their next poll. Inside [Outbox.Transact]'s local function
// there is no need: Transact notifies after its commit.
//
// tx must be inside a transaction: the handle passed to db.Transaction's
// function, one from db.Begin, or one derived from them. A plain handle
// would commit the rows on their own, apart from any business write, so
// EnqueueTx refuses it with [ErrNotInTransaction] before writing anything.
func (o *Outbox) EnqueueTx(ctx context.Context, tx *gorm.DB, msgs ...*txmsg.Message) error {
	if tx == nil {
		return fmt.Errorf("%w: outbox: EnqueueTx needs a transaction", txmsg.ErrInvalidConfig)
	}
	if tx.Error != nil {
		return fmt.Errorf("outbox: enqueue: %w", tx.Error)
	}
	if !inTransaction(tx) {
		return ErrNotInTransaction
	}
	rows, err := o.prepare(msgs)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("outbox: enqueue: %w", err)
	}
	assignIDs(msgs, rows)
	return o.insert(ctx, tx, rows)
}

// inTransaction reports whether tx runs inside a transaction, the way
// gorm itself decides it: its connection can commit.
func inTransaction(tx *gorm.DB) bool {
	if tx.Statement == nil {
		return false
	}
	c, ok := tx.Statement.ConnPool.(gorm.TxCommitter)
	return ok && c != nil && !reflect.ValueOf(c).IsNil()
}

// prepare validates msgs and builds their rows, without IDs. Nothing is
// changed when one fails.
func (o *Outbox) prepare(msgs []*txmsg.Message) ([]*Row, error) {
	now := time.Now().UTC()
	rows := make([]*Row, len(msgs))
	for i, m := range msgs {
		err := m.Validate(o.cfg.MaxBodySize)
		if err == nil {
			rows[i], err = newRow(m, o.cfg.Buckets, now)
		}
		if err != nil {
			if len(msgs) == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("outbox: message %d of %d: %w", i+1, len(msgs), err)
		}
	}
	return rows, nil
}

// assignIDs gives messages without an ID a new one, and each row its
// message's ID.
func assignIDs(msgs []*txmsg.Message, rows []*Row) {
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = txmsg.NewID()
		}
		rows[i].MsgID = m.ID
	}
}

// insert writes prepared rows, in chunks that keep each statement small.
// insertChunkRows keeps a multi-row INSERT under the server's limit of
// 65,535 placeholders (the row has about 15 columns).
const insertChunkRows = 1000

func (o *Outbox) insert(ctx context.Context, tx *gorm.DB, rows []*Row) error {
	for len(rows) > 0 {
		n, size := 0, 0
		for n < len(rows) && n < insertChunkRows && (n == 0 || size+len(rows[n].Body) <= insertChunkBytes) {
			size += len(rows[n].Body)
			n++
		}
		chunk := rows[:n]
		rows = rows[n:]
		if err := o.insertChunk(ctx, tx, chunk); err != nil {
			if store.IsDuplicate(tx, err) {
				return fmt.Errorf("%w: outbox: %s already holds %s: %w", txmsg.ErrDuplicateID, o.cfg.Table, idList(chunk), err)
			}
			return fmt.Errorf("outbox: insert into %s: %w", o.cfg.Table, err)
		}
	}
	return nil
}

// insertChunk writes one chunk: as a single literal INSERT (one round trip)
// when the handle allows it and the statement is small, otherwise through
// gorm with arguments.
//
// The deliver_at column is written only by chunks holding a delayed row,
// so tables that Migrate has not given it yet take undelayed rows as
// before.
func (o *Outbox) insertChunk(ctx context.Context, tx *gorm.DB, chunk []*Row) error {
	delayed := false
	for _, r := range chunk {
		delayed = delayed || r.deliverAtExpr() != "NULL"
	}
	err := o.insertRows(ctx, tx, chunk, delayed)
	var me *mysql.MySQLError
	if delayed && errors.As(err, &me) && me.Number == errBadField {
		return fmt.Errorf("%w: the outbox table %s has no deliver_at column for delayed messages; run Outbox.Migrate (or txmsgctl migrate) first: %w",
			txmsg.ErrInvalidConfig, o.cfg.Table, err)
	}
	return err
}

func (o *Outbox) insertRows(ctx context.Context, tx *gorm.DB, chunk []*Row, delayed bool) error {
	if lit, ok := store.LiteralsFor(tx); ok {
		if q, fits := o.literalInsert(lit, chunk, delayed); fits {
			return tx.WithContext(ctx).Exec(q).Error
		}
	}
	values := make([]map[string]any, len(chunk))
	for i, r := range chunk {
		values[i] = map[string]any{
			"msg_id": r.MsgID, "topic": r.Topic, "tag": r.Tag, "keys": r.Keys, "sharding_key": r.ShardingKey,
			"bucket": r.Bucket, "body": r.Body, "properties": r.Properties, "status": r.Status, "attempts": r.Attempts,
			"next_attempt_at": gorm.Expr(r.dueExpr()), "last_error": r.LastError,
			"created_at": gorm.Expr(dbClock), "updated_at": gorm.Expr(dbClock), "sent_at": r.SentAt,
		}
		if delayed {
			values[i]["deliver_at"] = gorm.Expr(r.deliverAtExpr())
		}
	}
	return tx.WithContext(ctx).Table(o.cfg.Table).Create(&values).Error
}

// dbClock is the database's clock in UTC: a row's times are written with
// it, as the relays compare them with it, so that neither the hosts'
// clocks nor the DSNs' time zones (loc) shift when a row is due.
const dbClock = "UTC_TIMESTAMP(6)"

// literalInsert is chunk's INSERT with every value a literal; fits is
// false when it would exceed store.MaxLiteralBytes.
func (o *Outbox) literalInsert(lit store.Literals, chunk []*Row, delayed bool) (q string, fits bool) {
	size := 256
	for _, r := range chunk {
		size += 2*(len(r.MsgID)+len(r.Topic)+len(r.Tag)+len(r.Keys)+len(r.ShardingKey)+len(r.Body)+len(r.Properties)+len(r.Status)+len(r.LastError)) + 240
	}
	if size > store.MaxLiteralBytes {
		return "", false
	}
	b := make([]byte, 0, size)
	b = append(b, "INSERT INTO `"...)
	b = append(b, o.cfg.Table...)
	b = append(b, "` (`msg_id`,`topic`,`tag`,`keys`,`sharding_key`,`bucket`,`body`,`properties`,`status`,`attempts`,"+
		"`next_attempt_at`,`last_error`,`created_at`,`updated_at`,`sent_at`"...)
	if delayed {
		b = append(b, ",`deliver_at`"...)
	}
	b = append(b, ") VALUES "...)
	for i, r := range chunk {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '(')
		b = lit.String(b, r.MsgID)
		b = append(b, ',')
		b = lit.String(b, r.Topic)
		b = append(b, ',')
		b = lit.String(b, r.Tag)
		b = append(b, ',')
		b = lit.String(b, r.Keys)
		b = append(b, ',')
		b = lit.String(b, r.ShardingKey)
		b = append(b, ',')
		b = lit.Int(b, int64(r.Bucket))
		b = append(b, ',')
		b = lit.Bytes(b, r.Body)
		b = append(b, ',')
		b = lit.String(b, r.Properties)
		b = append(b, ',')
		b = lit.String(b, string(r.Status))
		b = append(b, ',')
		b = lit.Int(b, int64(r.Attempts))
		b = append(b, ',')
		b = append(b, r.dueExpr()...)
		b = append(b, ',')
		b = lit.String(b, r.LastError)
		b = append(b, ',')
		b = append(b, dbClock...)
		b = append(b, ',')
		b = append(b, dbClock...)
		b = append(b, ',')
		if r.SentAt != nil {
			b = lit.Time(b, *r.SentAt)
		} else {
			b = append(b, "NULL"...)
		}
		if delayed {
			b = append(b, ',')
			b = append(b, r.deliverAtExpr()...)
		}
		b = append(b, ')')
	}
	return string(b), true
}

func idList(rows []*Row) string {
	if len(rows) == 1 {
		return rows[0].MsgID
	}
	return fmt.Sprintf("one of %d messages (%s, …)", len(rows), rows[0].MsgID)
}

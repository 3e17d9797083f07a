package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/txmsg"
)

// errNotTried marks rows of a claimed batch that were not published this
// time (ordered mode holds them back); marking leaves them untouched.
var errNotTried = errors.New("outbox: not tried")

// errAbandoned rolls a claim back when Run is cancelled before publishing.
var errAbandoned = errors.New("outbox: batch abandoned on shutdown")

// cycleUnordered claims the due rows that no other relay holds, publishes
// them in one call and marks them, all in one transaction.
//
// Rows are taken in (next_attempt_at, id) order: that is the order of the
// (status, next_attempt_at, id) index, so the locking read stops after
// BatchSize rows instead of locking every due row to sort them by id.
// Without Ordered the order carries no promise anyway.
func (r *Relay) cycleUnordered(ctx context.Context) (cycleResult, error) {
	var res cycleResult
	err := r.inTx(ctx, func(tx *gorm.DB) error {
		now := time.Now().UTC()
		var rows []*Row
		err := tx.WithContext(ctx).Table(r.cfg.Table).
			Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked}).
			Where("status = ? AND next_attempt_at <= ?", StatusPending, now).
			Order("next_attempt_at, id").
			Limit(r.cfg.BatchSize).
			Find(&rows).Error
		if err != nil {
			return fmt.Errorf("outbox: claim from %s: %w", r.cfg.Table, err)
		}
		if len(rows) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return errAbandoned
		}
		results := r.publishRows(ctx, rows, nil)
		if err := r.hookAfterPublish(ctx, rows, results); err != nil {
			return err
		}
		sent, err := r.mark(tx, rows, results)
		if err != nil {
			return err
		}
		res.more = len(rows) == r.cfg.BatchSize && sent > 0
		return nil
	})
	if errors.Is(err, errAbandoned) {
		return res, nil
	}
	return res, err
}

// publishRows publishes rows[i] for each i in idx (all rows when idx is
// nil) in one Publish call, and returns one result per row: nil when
// published, the error otherwise, errNotTried for rows outside idx.
func (r *Relay) publishRows(ctx context.Context, rows []*Row, idx []int) []error {
	results := make([]error, len(rows))
	if idx == nil {
		idx = make([]int, len(rows))
		for i := range rows {
			idx[i] = i
		}
	} else {
		for i := range results {
			results[i] = errNotTried
		}
	}
	msgs := make([]*txmsg.Message, 0, len(idx))
	sendIdx := make([]int, 0, len(idx))
	for _, i := range idx {
		m, err := rows[i].message()
		if err != nil {
			results[i] = err
			continue
		}
		msgs = append(msgs, m)
		sendIdx = append(sendIdx, i)
	}
	if len(msgs) == 0 {
		return results
	}
	for j, err := range r.publish(ctx, msgs) {
		results[sendIdx[j]] = err
	}
	return results
}

// publish calls the publisher with a context that outlives Run's, so a
// shutdown lets the batch finish, and turns its answer into one error per
// message. A panicking publisher fails the whole batch.
func (r *Relay) publish(ctx context.Context, msgs []*txmsg.Message) (errs []error) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			errs = fill(len(msgs), &txmsg.PanicError{Value: v, Stack: debug.Stack()})
			r.log.Error("publisher panicked; the batch will be retried", "panic", v, "count", len(msgs))
		}
	}()
	start := time.Now()
	err := r.pub.Publish(pctx, msgs...)
	if len(r.cfg.Hooks) > 0 {
		defer func() {
			failed := 0
			for _, e := range errs {
				if e != nil {
					failed++
				}
			}
			r.cfg.Hooks.RelayBatch(ctx, len(msgs), failed, time.Since(start))
		}()
	}
	if err == nil {
		return make([]error, len(msgs))
	}
	var be *txmsg.BatchError
	if errors.As(err, &be) && len(be.Errs) == len(msgs) {
		return be.Errs
	}
	return fill(len(msgs), err)
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (r *Relay) hookAfterPublish(ctx context.Context, rows []*Row, results []error) error {
	if r.afterPublish == nil {
		return nil
	}
	var msgs []*txmsg.Message
	for i, row := range rows {
		if results[i] == nil {
			m, _ := row.message()
			msgs = append(msgs, m)
		}
	}
	if err := r.afterPublish(ctx, msgs); err != nil {
		return &crashError{err: err}
	}
	return nil
}

// failGroup is the failed rows that get the same update.
type failGroup struct {
	attempts int
	dead     bool
	msg      string
}

// mark records the results of a batch in the claim transaction: published
// rows become sent; failed rows count an attempt and back off, or become
// dead after MaxAttempts. It returns how many rows were sent.
func (r *Relay) mark(tx *gorm.DB, rows []*Row, results []error) (int, error) {
	now := time.Now().UTC()
	var sent []int64
	groups := map[failGroup][]int64{}
	var firstErr error
	failed := 0
	for i, row := range rows {
		err := results[i]
		switch {
		case err == nil:
			sent = append(sent, row.ID)
			if r.log.Enabled(context.Background(), slog.LevelDebug) {
				r.log.Debug("published", "txmsg_id", row.MsgID, "topic", row.Topic, "state", StatusSent)
			}
		case errors.Is(err, errNotTried):
		default:
			failed++
			if firstErr == nil {
				firstErr = err
			}
			g := failGroup{attempts: row.Attempts + 1, msg: truncate(err.Error(), maxErrorLen)}
			g.dead = r.cfg.MaxAttempts > 0 && g.attempts >= r.cfg.MaxAttempts
			groups[g] = append(groups[g], row.ID)
			if g.dead {
				r.log.Error("message is dead after its last attempt; requeue it to retry",
					"txmsg_id", row.MsgID, "topic", row.Topic, "state", StatusDead, "attempts", g.attempts, "err", err)
			}
		}
	}
	if len(sent) > 0 {
		err := tx.Table(r.cfg.Table).Where("id IN ?", sent).Updates(map[string]any{
			"status":     StatusSent,
			"sent_at":    now,
			"updated_at": now,
			"last_error": "",
		}).Error
		if err != nil {
			return 0, fmt.Errorf("outbox: mark %d rows sent: %w", len(sent), err)
		}
	}
	var retryIn time.Duration
	for g, ids := range groups {
		set := map[string]any{
			"attempts":   g.attempts,
			"last_error": g.msg,
			"updated_at": now,
		}
		if g.dead {
			set["status"] = StatusDead
		} else {
			d := jitter(expBackoff(r.cfg.MinBackoff, r.cfg.MaxBackoff, g.attempts))
			set["next_attempt_at"] = now.Add(d)
			if retryIn == 0 || d < retryIn {
				retryIn = d
			}
		}
		if err := tx.Table(r.cfg.Table).Where("id IN ?", ids).Updates(set).Error; err != nil {
			return 0, fmt.Errorf("outbox: record failed attempt of %d rows: %w", len(ids), err)
		}
	}
	if failed > 0 {
		r.log.Warn("publish failed; rows back off", "failed", failed, "sent", len(sent), "retry_in", retryIn, "err", firstErr)
	}
	return len(sent), nil
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// publishCall loads the bodies of rows[i] for i in call, publishes them in
// one Publish call, records the results and drops the bodies again.
func (r *Relay) publishCall(ctx context.Context, tx *gorm.DB, rows []*Row, call []int, results []error) error {
	if len(call) == 0 {
		return nil
	}
	if err := r.loadBodies(ctx, tx, rows, call); err != nil {
		return err
	}
	out := r.publishRows(ctx, rows, call)
	for _, i := range call {
		results[i] = out[i]
		if r.afterPublish == nil {
			rows[i].Body = nil
		}
	}
	return nil
}

// loadBodies reads the bodies of rows[i] for i in idx; the rows are locked
// by the claim already.
func (r *Relay) loadBodies(ctx context.Context, tx *gorm.DB, rows []*Row, idx []int) error {
	ids := make([]int64, len(idx))
	at := make(map[int64]*Row, len(idx))
	for j, i := range idx {
		ids[j] = rows[i].ID
		at[rows[i].ID] = rows[i]
	}
	var bodies []struct {
		ID   int64
		Body []byte
	}
	err := find(tx.WithContext(context.WithoutCancel(ctx)), func(db *gorm.DB) *gorm.DB {
		return db.Table(r.table).Select("id, body").Where("id IN ?", ids)
	}, &bodies)
	if err != nil {
		return fmt.Errorf("outbox: load %d bodies from %s: %w", len(ids), r.table, err)
	}
	for _, b := range bodies {
		if row := at[b.ID]; row != nil {
			row.Body = b.Body
			if row.Body == nil {
				row.Body = []byte{}
			}
		}
	}
	return nil
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
			stack := debug.Stack()
			errs = fill(len(msgs), &txmsg.PanicError{Value: v, Stack: stack})
			r.log.Error("publisher panicked; the batch will be retried", "panic", v, "count", len(msgs), "stack", string(stack))
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
			driver.RelayBatch(r.cfg.Hooks, ctx, r.cfg.Name, r.table, len(msgs), failed, time.Since(start))
		}()
	}
	if err == nil {
		return make([]error, len(msgs))
	}
	var be *txmsg.BatchError
	if errors.As(err, &be) && len(be.Errs) == len(msgs) {
		errs = append([]error(nil), be.Errs...)
	} else {
		errs = fill(len(msgs), err)
	}
	r.classify(ctx, errs)
	return errs
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

package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// errNotTried marks rows of a claimed batch that were not published this
// time (ordered mode holds them back); marking leaves them untouched.
var errNotTried = errors.New("outbox: not tried")

// errAbandoned rolls a claim back when Run is cancelled before publishing.
var errAbandoned = errors.New("outbox: batch abandoned on shutdown")

// cycleUnordered renews the relay's bucket leases when due and claims due
// rows from the buckets it owns.
//
// Unordered relays share the work through the same bucket leases as
// ordered ones: each relay claims only from the buckets it holds, so
// relays no longer scan past one another's locked rows at the head of one
// index, which made throughput fall as relays were added. The claim still
// uses SKIP LOCKED: while a bucket changes hands, its previous owner may be
// finishing a batch in it, and the new owner skips those rows instead of
// waiting for them or publishing them twice.
//
// The owner of bucket 0 also claims the rows whose bucket lies outside
// [0, Buckets), written with another Buckets setting or by hand, so no row
// is left behind.
func (r *Relay) cycleUnordered(ctx context.Context) (cycleResult, error) {
	res, _, owned, err := r.beginCycle(ctx)
	if err != nil {
		return res, err
	}
	if len(owned) == 0 || ctx.Err() != nil {
		return res, nil
	}
	more, err := r.claimDue(ctx, owned)
	res.more = more
	return res, err
}

// beginCycle starts a cycle of either kind: it first applies the marks a
// failed claim left (see remark), then, unless the relay has handed its
// buckets over for being cut off from the broker (see handOverIfCutOff),
// runs a lease round when one is due,
// and returns the cycle's result so far (the next lease round as its
// retry time), the time it took as now, and the buckets this relay may
// claim from.
func (r *Relay) beginCycle(ctx context.Context) (res cycleResult, now time.Time, owned []int, err error) {
	if err := r.remark(ctx); err != nil {
		return res, now, nil, err
	}
	if !r.standby.until.IsZero() {
		now = time.Now().UTC()
		if now.Before(r.standby.until) {
			res.retryAt(now, r.standby.until)
			return res, now, nil, nil
		}
		r.rejoin("the relay handed its buckets over " + r.cfg.HandOverAfter.String() + " ago")
	}
	if err := r.maintainLeases(ctx); err != nil {
		return res, now, nil, err
	}
	now = r.now().UTC()
	res.retryAt(now, r.lease.next)
	return res, now, r.lease.usable(now, r.cfg.LeaseTTL), nil
}

// claimDue claims the due rows of the owned buckets that no other relay
// holds, publishes them and marks them, all in one transaction, and
// reports whether it should be called again at once.
//
// Rows are taken in (bucket, next_attempt_at, id) order: that is the order
// of the (status, bucket, next_attempt_at, id) index, so the locking read
// stops after BatchSize rows instead of locking every due row to sort
// them. The scan starts at the bucket after the one the previous claim
// ended in and wraps around, so a deep bucket does not starve the others.
// Without Ordered the order carries no promise anyway.
//
// The claim reads the rows without their bodies, then loads and publishes
// them in Publish calls of at most PublishBytes, up to ClaimBytes in all
// and for at most PublishTimeout before the last call starts; rows left
// over stay pending for the next claim.
func (r *Relay) claimDue(ctx context.Context, owned []int) (more bool, err error) {
	var hi, lo []int
	for _, b := range owned {
		if b >= r.lease.cursor {
			hi = append(hi, b)
		} else {
			lo = append(lo, b)
		}
	}
	// What the claim published, and the marks it made of it, outlive the
	// transaction: when it fails after publishing, recoverMarks applies
	// them again.
	var rows []*Row
	var results []error
	var plan *markPlan
	err = r.inTx(ctx, func(tx *gorm.DB) error {
		limit := r.claimLimit()
		var found []*claimed
		for _, part := range [][]int{hi, lo} {
			if len(part) == 0 || len(found) == limit {
				continue
			}
			var got []*claimed
			if err := r.dueIn(ctx, tx, part, limit-len(found)).Find(&got).Error; err != nil {
				return fmt.Errorf("outbox: claim from %s: %w", r.cfg.Table, err)
			}
			found = append(found, got...)
		}
		if len(found) > 0 {
			r.lease.cursor = found[len(found)-1].Bucket + 1
		}
		if len(found) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return errAbandoned
		}
		var sizes []int
		rows, sizes = r.split(found)
		results = notTried(len(rows))
		b := r.newBudget()
		all := make([]int, len(rows))
		for i := range all {
			all[i] = i
		}
		cut := false
		for len(all) > 0 {
			if !b.open(ctx) {
				cut = true
				break
			}
			call, full := b.take(all, sizes)
			if err := r.publishCall(ctx, tx, rows, call, results); err != nil {
				return err
			}
			all = all[len(call):]
			if full {
				cut = true
				break
			}
		}
		if err := r.hookAfterPublish(ctx, rows, results); err != nil {
			return err
		}
		if err := r.hookBeforeMark(ctx, tx, results); err != nil {
			return err
		}
		var err error
		if plan, err = r.mark(tx, rows, results); err != nil {
			return err
		}
		more = (len(rows) == limit || cut) && plan.sent > 0
		return nil
	})
	if errors.Is(err, errAbandoned) {
		return more, nil
	}
	if err != nil && r.recoverMarks(ctx, err, rows, results, plan) {
		return true, nil
	}
	return more, err
}

// dueIn is the locking read of up to limit due rows in buckets, in index
// order; with bucket 0 among them it also reads the buckets outside
// [0, Buckets). Due is by the database's clock, as next_attempt_at is
// written.
func (r *Relay) dueIn(ctx context.Context, tx *gorm.DB, buckets []int, limit int) *gorm.DB {
	return tx.WithContext(ctx).Table(r.cfg.Table).Select(metaColumns).
		Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked}).
		Where("status = ?", StatusPending).Where(r.inBuckets(tx, buckets)).Where("next_attempt_at <= UTC_TIMESTAMP(6)").
		Order("bucket, next_attempt_at, id").Limit(limit)
}

// inBuckets is the condition "the row lies in one of buckets", which
// takes in the buckets outside [0, Buckets) when bucket 0 is among them.
// buckets must not be empty.
func (r *Relay) inBuckets(db *gorm.DB, buckets []int) *gorm.DB {
	cond := db.Where("bucket IN ?", buckets)
	if slices.Contains(buckets, 0) {
		cond = cond.Or("bucket < 0").Or("bucket >= ?", r.cfg.Buckets)
	}
	return cond
}

// metaColumns are the columns a claim reads: every column but the body,
// and the body's length instead, and the database's clock.
const metaColumns = "id, msg_id, topic, tag, `keys`, sharding_key, bucket, properties, status, attempts, " +
	"next_attempt_at, last_error, created_at, updated_at, sent_at, LENGTH(body) AS body_size, UTC_TIMESTAMP(6) AS db_now"

// claimed is a claimed row without its body.
type claimed struct {
	Row
	BodySize int `gorm:"column:body_size"`
	// DBNow is the database's clock when the row was read, read as the
	// row's times are.
	DBNow time.Time `gorm:"column:db_now"`
}

// split separates claimed rows and their body sizes, and keeps their mean
// size for the next claim's limit.
func (r *Relay) split(found []*claimed) ([]*Row, []int) {
	rows := make([]*Row, len(found))
	sizes := make([]int, len(found))
	total := 0
	for i, c := range found {
		rows[i] = &c.Row
		sizes[i] = c.BodySize
		total += c.BodySize
	}
	if len(found) > 0 {
		r.meanBody = total / len(found)
	}
	return rows, sizes
}

// claimLimit is how many rows a claim reads: BatchSize, or fewer when the
// rows of the last claim were so large that BatchSize of them would be far
// over ClaimBytes. Reading a row's body length costs the database a read
// of the body, so a claim reads about as many rows as it can publish.
func (r *Relay) claimLimit() int {
	if r.meanBody <= 0 {
		return r.cfg.BatchSize
	}
	return max(1, min(r.cfg.BatchSize, r.cfg.ClaimBytes/r.meanBody+1))
}

func notTried(n int) []error {
	results := make([]error, n)
	for i := range results {
		results[i] = errNotTried
	}
	return results
}

// claimBudget bounds one claim: the bytes of bodies it loads, the rows it
// publishes, its Publish calls' bytes, and the time after which it starts
// no new Publish call.
type claimBudget struct {
	bytes, rows  int
	publishBytes int
	deadline     time.Time
	calls        int
}

func (r *Relay) newBudget() *claimBudget {
	d := r.cfg.PublishTimeout
	if r.cfg.Ordered {
		d = min(d, r.cfg.LeaseTTL/2)
	}
	return &claimBudget{
		bytes:        r.cfg.ClaimBytes,
		rows:         r.cfg.BatchSize,
		publishBytes: r.cfg.PublishBytes,
		deadline:     time.Now().Add(d),
	}
}

// open reports whether another Publish call may start: the first always
// may, later ones while budget and time are left and Run is not stopping.
func (b *claimBudget) open(ctx context.Context) bool {
	if b.calls == 0 {
		return true
	}
	return ctx.Err() == nil && b.bytes > 0 && b.rows > 0 && time.Now().Before(b.deadline)
}

// take returns the longest prefix of idx that fits one Publish call and
// what is left of the claim's budget, and charges it. The claim's first
// call takes at least one row, whatever its size. full is true when the
// claim's budget stopped the prefix short of idx.
func (b *claimBudget) take(idx []int, sizes []int) (call []int, full bool) {
	callBytes := 0
	n := 0
	for ; n < len(idx); n++ {
		size := sizes[idx[n]]
		if n > 0 || b.calls > 0 {
			if size > b.bytes || b.rows == 0 {
				full = true
				break
			}
			if n > 0 && callBytes+size > b.publishBytes {
				break
			}
		}
		callBytes += size
		b.bytes -= size
		b.rows--
	}
	b.calls++
	return idx[:n], full
}

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
	err := tx.WithContext(context.WithoutCancel(ctx)).Table(r.cfg.Table).Select("id, body").Where("id IN ?", ids).Find(&bodies).Error
	if err != nil {
		return fmt.Errorf("outbox: load %d bodies from %s: %w", len(ids), r.cfg.Table, err)
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
			driver.RelayBatch(r.cfg.Hooks, ctx, len(msgs), failed, time.Since(start))
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

// classify decides, for each failed message of one Publish call, whether
// the broker refused the message, which counts toward MaxAttempts, or the
// broker or the route failed, which does not: such errors are wrapped as
// [txmsg.ErrUnavailable]. A Publisher says which by wrapping
// txmsg.ErrRejected or txmsg.ErrUnavailable; an error that says neither
// is a broker failure when every message of the call failed the same way,
// and the message's own failure otherwise.
func (r *Relay) classify(ctx context.Context, errs []error) {
	same := true
	for _, e := range errs {
		if e == nil || e.Error() != errs[0].Error() {
			same = false
			break
		}
	}
	waiting := 0
	var first error
	for i, e := range errs {
		switch {
		case e == nil || rejected(e):
			continue
		case txmsg.IsUnavailable(e):
		case same:
			errs[i] = &brokerError{err: e}
		default:
			continue
		}
		waiting++
		if first == nil {
			first = e
		}
	}
	if waiting > 0 {
		driver.RelayUnavailable(r.cfg.Hooks, ctx, waiting, first)
	}
}

// rejected reports whether err is a failure of the message itself.
func rejected(err error) bool {
	var pe *txmsg.PanicError
	return errors.Is(err, txmsg.ErrRejected) || errors.Is(err, txmsg.ErrInvalidMessage) || errors.As(err, &pe)
}

// brokerError marks an unclassified error that failed a whole Publish
// call as the broker's.
type brokerError struct{ err error }

func (e *brokerError) Error() string        { return e.err.Error() }
func (e *brokerError) Unwrap() error        { return e.err }
func (e *brokerError) Is(target error) bool { return target == txmsg.ErrUnavailable }

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
	waiting  bool
	msg      string
}

// waitingPrefix starts the last_error of a row whose last publish failed
// because the broker or the route was unavailable; Stats counts them.
const waitingPrefix = "waiting for the broker: "

// markPlan is the update of a claim's rows that records what its
// Publish calls did. Its values are computed once from the rows as
// claimed (a failed row's attempts are the claimed count plus one, its
// backoff drawn once) and its times are the database's clock when it is
// applied; applied again, it changes only the rows still as claimed (see
// applyMarks), so applying it twice leaves the rows as applying it once.
type markPlan struct {
	updates []markUpdate
	// sent counts the rows published.
	sent int
	// since is when the claim transaction failed, for a plan held to be
	// applied again.
	since time.Time
}

// markUpdate is one statement of a markPlan: set on rows.
type markUpdate struct {
	what string
	set  map[string]any
	rows []*Row
}

// rows counts the rows the plan updates.
func (p *markPlan) rows() int {
	n := 0
	for _, u := range p.updates {
		n += len(u.rows)
	}
	return n
}

// planMarks works out the marks of a batch's results: published rows
// become sent; rows the broker refused count an attempt and back off, or
// become dead after MaxAttempts; rows that failed because the broker or
// the route was unavailable back off without counting an attempt, by the
// relay's own count of failing cycles up to MaxWaitBackoff, and are never
// dead. Rows not tried are left out. It counts the cycle's results and
// logs the failures, once per batch.
func (r *Relay) planMarks(rows []*Row, results []error) *markPlan {
	dbTime := gorm.Expr("UTC_TIMESTAMP(6)")
	p := &markPlan{}
	var sent []*Row
	groups := map[failGroup][]*Row{}
	var order []failGroup
	var firstErr, firstWait error
	failed, waiting := 0, 0
	for i, row := range rows {
		err := results[i]
		var g failGroup
		switch {
		case err == nil:
			sent = append(sent, row)
			if r.log.Enabled(context.Background(), slog.LevelDebug) {
				r.log.Debug("published", "txmsg_id", row.MsgID, "topic", row.Topic, "state", StatusSent)
			}
			continue
		case errors.Is(err, errNotTried):
			continue
		case txmsg.IsUnavailable(err):
			waiting++
			if firstWait == nil {
				firstWait = err
			}
			g = failGroup{attempts: row.Attempts, waiting: true, msg: truncate(waitingPrefix+err.Error(), maxErrorLen)}
		default:
			failed++
			if firstErr == nil {
				firstErr = err
			}
			g = failGroup{attempts: row.Attempts + 1, msg: truncate(err.Error(), maxErrorLen)}
			g.dead = r.cfg.MaxAttempts > 0 && g.attempts >= r.cfg.MaxAttempts
			if g.dead {
				r.log.Error("message is dead after its last attempt; requeue it to retry",
					"txmsg_id", row.MsgID, "topic", row.Topic, "state", StatusDead, "attempts", g.attempts, "err", err)
			}
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], row)
	}
	r.cycle.sent += len(sent)
	r.cycle.waiting += waiting
	if waiting > 0 && r.cycle.err == nil {
		r.cycle.err = firstWait
	}
	p.sent = len(sent)
	if len(sent) > 0 {
		p.updates = append(p.updates, markUpdate{
			what: fmt.Sprintf("mark %d rows sent", len(sent)),
			set: map[string]any{
				"status":     StatusSent,
				"sent_at":    dbTime,
				"updated_at": dbTime,
				"last_error": "",
			},
			rows: sent,
		})
	}
	var retryIn time.Duration
	for _, g := range order {
		set := map[string]any{
			"attempts":   g.attempts,
			"last_error": g.msg,
			"updated_at": dbTime,
		}
		var d time.Duration
		switch {
		case g.dead:
			set["status"] = StatusDead
		case g.waiting:
			d = jitter(expBackoff(r.cfg.MinBackoff, r.cfg.MaxWaitBackoff, r.outage.wait+1))
		default:
			d = jitter(expBackoff(r.cfg.MinBackoff, r.cfg.MaxBackoff, g.attempts))
		}
		if !g.dead {
			set["next_attempt_at"] = gorm.Expr("DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)", d.Microseconds())
			if retryIn == 0 || d < retryIn {
				retryIn = d
			}
		}
		p.updates = append(p.updates, markUpdate{
			what: fmt.Sprintf("record failed attempt of %d rows", len(groups[g])),
			set:  set,
			rows: groups[g],
		})
	}
	if failed > 0 {
		r.log.Warn("publish failed; rows back off", "failed", failed, "sent", len(sent), "retry_in", retryIn, "err", firstErr)
	}
	if waiting > 0 {
		r.log.Warn("broker unavailable; rows wait without counting an attempt", "waiting", waiting, "sent", len(sent),
			"retry_in", retryIn, "err", firstWait)
	}
	return p
}

// applyMarks runs the plan's updates in tx and returns how many rows they
// changed. In the claim transaction the rows are locked by the claim. A
// plan applied again after that transaction failed (unchanged) changes
// only the rows that are still pending and as the claim read them: same
// updated_at, which every change of state sets. A row that another relay
// published or failed meanwhile (after this relay's lease ran out), or
// that an operator requeued or purged, is left as it is.
func (r *Relay) applyMarks(tx *gorm.DB, p *markPlan, unchanged bool) (int64, error) {
	var n int64
	for _, u := range p.updates {
		ids := make([]int64, len(u.rows))
		for i, row := range u.rows {
			ids[i] = row.ID
		}
		q := tx.Table(r.cfg.Table).Where("id IN ?", ids)
		if unchanged {
			pairs := make([][]any, len(u.rows))
			for i, row := range u.rows {
				pairs[i] = []any{row.ID, row.UpdatedAt}
			}
			q = q.Where("status = ? AND (id, updated_at) IN ?", StatusPending, pairs)
		}
		res := q.Updates(u.set)
		if res.Error != nil {
			return n, fmt.Errorf("outbox: %s: %w", u.what, res.Error)
		}
		n += res.RowsAffected
	}
	return n, nil
}

// mark plans the marks of a batch and applies them in the claim
// transaction; it returns the plan, which the caller keeps in case the
// transaction fails afterwards.
func (r *Relay) mark(tx *gorm.DB, rows []*Row, results []error) (*markPlan, error) {
	p := r.planMarks(rows, results)
	_, err := r.applyMarks(tx, p, false)
	return p, err
}

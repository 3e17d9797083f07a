package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
)

// failGroup is the failed rows that get the same update.
type failGroup struct {
	attempts int
	parked   bool
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
// are parked after MaxAttempts; rows that failed because the broker or
// the route was unavailable back off without counting an attempt, by the
// relay's own count of failing cycles up to MaxWaitBackoff, and are never
// parked. Rows not tried are left out. It counts the cycle's results and
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
			g.parked = r.cfg.MaxAttempts > 0 && g.attempts >= r.cfg.MaxAttempts
			if g.parked {
				r.log.Error("message is parked after its last attempt; requeue it to retry",
					"txmsg_id", row.MsgID, "topic", row.Topic, "state", "parked", "attempts", g.attempts, "err", err)
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
		case g.parked:
			set["status"] = StatusParked
		case g.waiting:
			d = jitter(expBackoff(r.cfg.MinBackoff, r.cfg.MaxWaitBackoff, r.outage.wait+1))
		default:
			d = jitter(expBackoff(r.cfg.MinBackoff, r.cfg.MaxBackoff, g.attempts))
		}
		if !g.parked {
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
		changed, err := updates(tx, func(db *gorm.DB) *gorm.DB {
			q := db.Table(r.table).Where("id IN ?", ids)
			if unchanged {
				pairs := make([][]any, len(u.rows))
				for i, row := range u.rows {
					pairs[i] = []any{row.ID, row.UpdatedAt}
				}
				q = q.Where("status = ? AND (id, updated_at) IN ?", StatusPending, pairs)
			}
			return q
		}, u.set)
		if err != nil {
			return n, fmt.Errorf("outbox: %s: %w", u.what, err)
		}
		n += changed
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

// Re-applying the marks of a failed claim: remarkTries attempts in a
// row, remarkBackoff doubling between them; a plan still not applied is
// kept and tried again at the start of each cycle, for up to
// remarkHoldTTLs lease TTLs after the claim failed.
const (
	remarkTries    = 5
	remarkBackoff  = 50 * time.Millisecond
	remarkHoldTTLs = 10
)

// recoverMarks runs after a claim transaction failed with err. When the
// claim had published rows, or recorded failures, before it failed, the
// rows are still pending (or, after a lost COMMIT, perhaps marked): the
// marks are held and applied again in a new transaction before the relay
// claims anything else, so that a deadlock, a lock wait timeout or a lost
// connection does not make the next claim publish the rows again.
// plan is the claim's marks if it got to work them out, nil otherwise.
// It reports whether the marks are applied; false means err stands
// (nothing was published, or the marks are held for the next cycle).
//
// A test hook's simulated crash is left alone: a crashed relay marks
// nothing.
func (r *Relay) recoverMarks(ctx context.Context, err error, rows []*Row, results []error, plan *markPlan) bool {
	var crash *crashError
	if errors.As(err, &crash) || rows == nil {
		return false
	}
	if plan == nil {
		plan = r.planMarks(rows, results)
	}
	if len(plan.updates) == 0 {
		return false
	}
	plan.since = time.Now()
	r.unmarked = plan
	r.log.Warn("claim transaction failed after publishing; marking its rows in a new transaction",
		"err", err, "sent", plan.sent, "rows", plan.rows())
	return r.remark(ctx) == nil
}

// remark applies the held marks, if any, in a new transaction, with up to
// remarkTries attempts. It returns nil once they are applied (or there
// are none), and the last error otherwise; the marks are then kept for
// the next cycle, unless they are older than remarkHoldTTLs lease TTLs.
//
// In the new transaction the rows are no longer locked, so the update is
// guarded (see applyMarks): it changes only rows still as claimed. Until
// it applies, no other relay claims them: in both modes a relay claims
// only from the buckets it leases, and this relay neither claims nor runs
// a lease round, which is where it would hand a bucket over, while marks
// are held. Only if its lease runs out meanwhile may another relay
// publish the rows again, as after a crash.
func (r *Relay) remark(ctx context.Context) error {
	p := r.unmarked
	if p == nil {
		return nil
	}
	var err error
	for try := 1; try <= remarkTries; try++ {
		if try > 1 {
			time.Sleep(jitter(expBackoff(remarkBackoff, maxErrorBackoff, try-1)))
		}
		var changed int64
		err = r.inTx(ctx, func(tx *gorm.DB) error {
			var err error
			changed, err = r.applyMarks(tx, p, true)
			return err
		})
		if err == nil {
			r.unmarked = nil
			r.remarked.Add(1)
			r.log.Info("rows of the failed claim marked", "sent", p.sent, "rows", p.rows(), "changed", changed,
				"left", int64(p.rows())-changed, "tries", try)
			return nil
		}
	}
	if time.Since(p.since) > remarkHoldTTLs*r.cfg.LeaseTTL {
		r.unmarked = nil
		r.log.Error("giving up marking the rows of a failed claim; other relays own their buckets by now and may publish them again",
			"err", err, "sent", p.sent, "rows", p.rows(), "failed_at", p.since)
		return fmt.Errorf("outbox: mark %d rows of a failed claim: %w", p.rows(), err)
	}
	r.log.Warn("cannot mark the rows of a failed claim yet; the relay claims nothing until they are",
		"err", err, "sent", p.sent, "rows", p.rows(), "tries", remarkTries)
	return fmt.Errorf("outbox: mark %d rows of a failed claim: %w", p.rows(), err)
}

// remarkOnExit makes a last attempt at held marks when Run returns.
func (r *Relay) remarkOnExit(ctx context.Context) {
	if r.unmarked == nil {
		return
	}
	if err := r.remark(context.WithoutCancel(ctx)); err != nil && r.unmarked != nil {
		r.log.Error("relay stops with rows published but not marked; they will be published again",
			"err", err, "sent", r.unmarked.sent, "rows", r.unmarked.rows())
		r.unmarked = nil
	}
}

// hookBeforeMark runs the beforeMark test hook when the claim published
// a row.
func (r *Relay) hookBeforeMark(ctx context.Context, tx *gorm.DB, results []error) error {
	if r.beforeMark == nil || !slices.Contains(results, nil) {
		return nil
	}
	return r.beforeMark(ctx, tx)
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
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
	if err == nil && !more && !r.takeNudge() {
		r.lookAgainSoon(ctx, owned, &res)
	}
	return res, err
}

// Waits of lookAgainSoon: the first, and the longest (the poll interval
// bounds it too).
const (
	minSkippedWait = 5 * time.Millisecond
	maxSkippedWait = 500 * time.Millisecond
)

// lookAgainSoon runs after a claim that left nothing due behind as far as
// it could see: its locking read skips rows another transaction holds.
// Those are rows of a bucket whose previous owner is still publishing a
// batch from it, and rows that another relay's concurrent claim holds for
// a moment (two relays draining one table left one to three such rows
// per drain; one relay left none). Left alone, such
// a row waits for the next nudge or poll, up to PollInterval. So a plain
// read (one entry of the claim's index, no lock) looks for a due row in
// the relay's buckets: when there is one, res makes the relay claim again
// after a short wait, 5 ms doubling to 500 ms while it stays held.
func (r *Relay) lookAgainSoon(ctx context.Context, owned []int, res *cycleResult) {
	var ids []int64
	err := find(r.db.WithContext(ctx), func(db *gorm.DB) *gorm.DB {
		return db.Table(r.table).Select("id").
			Where("status = ?", StatusPending).Where(r.inBuckets(r.db, owned)).Where("next_attempt_at <= UTC_TIMESTAMP(6)").
			Limit(1)
	}, &ids)
	if err != nil || len(ids) == 0 {
		r.skipped = 0
		return
	}
	r.skipped = min(max(2*r.skipped, minSkippedWait), maxSkippedWait)
	now := time.Now()
	res.retryAt(now, now.Add(r.skipped))
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
			got, err := r.claimIn(tx.WithContext(ctx), part, limit-len(found))
			if err != nil {
				return err
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

// claimIn locks and returns up to limit due rows of buckets that no other
// transaction holds, in (bucket, next_attempt_at, id) order, without
// their bodies.
//
// It reads in two steps: a plain read of the due rows' ids (dueIn), then
// a locking read of those rows by primary key that checks again that
// they are pending and due and skips the ones another transaction holds.
// A single locking read of the range locked far more than the rows it
// returned while a large backlog drained: relay transactions were seen
// holding 100,000 to 800,000 row locks, up to 93 MB of lock heap each,
// until InnoDB, whose lock heaps live in the buffer pool, stopped the
// server for having filled it. Locking by primary key locks only the rows
// returned. A row the plain read found that is gone, sent or held by the
// time of the locking read is left out, and the claim returns fewer rows.
func (r *Relay) claimIn(tx *gorm.DB, buckets []int, limit int) ([]*claimed, error) {
	var ids []int64
	if err := find(tx, func(db *gorm.DB) *gorm.DB { return r.dueIn(db, buckets, limit) }, &ids); err != nil {
		return nil, fmt.Errorf("outbox: claim from %s: %w", r.table, err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var got []*claimed
	err := find(tx, func(db *gorm.DB) *gorm.DB {
		return db.Table(r.table).Select(r.columns()).
			Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked}).
			Where("id IN ?", ids).Where("status = ?", StatusPending).Where("next_attempt_at <= UTC_TIMESTAMP(6)").
			Order("bucket, next_attempt_at, id")
	}, &got)
	if err != nil {
		return nil, fmt.Errorf("outbox: claim from %s: %w", r.table, err)
	}
	return got, nil
}

// dueIn is the plain read of the ids of up to limit due rows in buckets,
// in index order; with bucket 0 among them it also reads the buckets
// outside [0, Buckets). Due is by the database's clock, as
// next_attempt_at is written.
func (r *Relay) dueIn(tx *gorm.DB, buckets []int, limit int) *gorm.DB {
	return tx.Table(r.table).Select("id").
		Where("status = ?", StatusPending).Where(r.inBuckets(tx, buckets)).Where("next_attempt_at <= UTC_TIMESTAMP(6)").
		Order("bucket, next_attempt_at, id").Limit(limit)
}

// inBuckets is the condition "the row lies in one of buckets", which
// takes in the buckets outside [0, Buckets) when bucket 0 is among them.
// buckets must not be empty.
func (r *Relay) inBuckets(db *gorm.DB, buckets []int) *gorm.DB {
	cond := db.Where("bucket IN ?", buckets)
	if slices.Contains(buckets, 0) {
		cond = cond.Or("bucket < 0").Or("bucket >= ?", r.buckets)
	}
	return cond
}

// metaColumns are the columns a claim reads: every column but the body,
// and the body's length instead, and the database's clock.
// A table that Migrate has not given the deliver_at column yet is read
// without it (metaColumnsV1).
const metaColumns = metaColumnsV1 + ", deliver_at"

const metaColumnsV1 = "id, msg_id, topic, tag, `keys`, sharding_key, bucket, properties, status, attempts, " +
	"next_attempt_at, last_error, created_at, updated_at, sent_at, LENGTH(body) AS body_size, UTC_TIMESTAMP(6) AS db_now"

// columns returns the columns the relay's claims read: metaColumns, or
// metaColumnsV1 while the table lacks deliver_at.
func (r *Relay) columns() string {
	if r.noDeliverAt {
		return metaColumnsV1
	}
	return metaColumns
}

// checkColumns looks up, at the start of Run, whether the table has the
// deliver_at column of delayed messages, and warns when it has not.
func (r *Relay) checkColumns(ctx context.Context) {
	has := r.db.WithContext(ctx).Migrator().HasColumn(r.table, "deliver_at")
	r.noDeliverAt = !has
	if !has && ctx.Err() == nil {
		r.log.Warn("the outbox table lacks the deliver_at column; run Outbox.Migrate (or txmsgctl migrate). Until then delayed messages cannot be enqueued")
	}
}

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

package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/txmsg"
)

// cycleOrdered renews leases when due and then works through each bucket
// this relay owns.
func (r *Relay) cycleOrdered(ctx context.Context) (cycleResult, error) {
	res, now, owned, err := r.beginCycle(ctx)
	if err != nil {
		return res, err
	}
	for _, b := range owned {
		if ctx.Err() != nil {
			return res, nil
		}
		br, err := r.claimBucket(ctx, b)
		if err != nil {
			return res, fmt.Errorf("%w (bucket %d)", err, b)
		}
		res.more = res.more || br.more
		if br.retryIn > 0 {
			res.retryAt(now, now.Add(br.retryIn))
		}
	}
	return res, nil
}

// claimBucket publishes the oldest pending rows of one bucket, keeping the
// id order of each sharding key.
//
// The read is a blocking FOR UPDATE in id order, not SKIP LOCKED: a locked
// row in the bucket is either held by a relay that owned the bucket before
// (its lease ran out mid-batch) or an outbox row whose writer has not
// committed yet. Skipping either would let later rows of the same key
// overtake it; waiting sees its outcome.
func (r *Relay) claimBucket(ctx context.Context, bucket int) (cycleResult, error) {
	var res cycleResult
	limit := r.claimLimit()
	// As in claimDue: kept for recoverMarks.
	var rows []*Row
	var results []error
	var plan *markPlan
	err := r.inTx(ctx, func(tx *gorm.DB) error {
		found, err := r.readBucket(ctx, tx, bucket, 0, nil, limit)
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return errAbandoned
		}
		// One key's backlog, or a failing row holding it back, must not
		// starve the other keys of the bucket: when the window is full, read
		// on past it, leaving out the keys already seen. Each key still gets
		// a prefix of its rows in id order.
		window := found
		for extra := 0; extra < extraWindows && len(window) == limit; extra++ {
			seen := map[string]bool{}
			for _, row := range found {
				if row.ShardingKey != "" {
					seen[row.ShardingKey] = true
				}
			}
			if window, err = r.readBucket(ctx, tx, bucket, found[len(found)-1].ID, seen, limit); err != nil {
				return err
			}
			found = append(found, window...)
		}
		var sizes []int
		rows, sizes = r.split(found)
		// The database's clock, against which the rows' times were
		// written, by whatever writer and in whatever time zone.
		rounds := r.planRounds(rows, found[0].DBNow, &res)
		results = notTried(len(rows))
		b := r.newBudget()
		stopped := map[string]bool{}
		cut := false
	rounds:
		for n, round := range rounds {
			if n > 0 && (n >= maxClaimRounds || !r.leaseHeld(bucket)) {
				cut = true
				break
			}
			var idx []int
			for _, i := range round {
				if !stopped[rows[i].ShardingKey] {
					idx = append(idx, i)
				}
			}
			// A round holds at most one row per key, so splitting it into
			// several Publish calls keeps each key's order; a round cut
			// short by the budget ends the claim, so no later row of a key
			// left out goes first.
			for len(idx) > 0 {
				if !b.open(ctx) {
					cut = true
					break rounds
				}
				call, full := b.take(idx, sizes)
				if err := r.publishCall(ctx, tx, rows, call, results); err != nil {
					return err
				}
				idx = idx[len(call):]
				waiting := false
				for _, i := range call {
					if results[i] != nil && rows[i].ShardingKey != "" {
						stopped[rows[i].ShardingKey] = true
					}
					waiting = waiting || txmsg.IsUnavailable(results[i])
				}
				if full || waiting {
					// Out of budget, or the broker is away: the rest of the
					// bucket waits for the next claim.
					cut = full
					break rounds
				}
			}
		}
		if err := r.hookAfterPublish(ctx, rows, results); err != nil {
			return err
		}
		if err := r.hookBeforeMark(ctx, tx, results); err != nil {
			return err
		}
		if plan, err = r.mark(tx, rows, results); err != nil {
			return err
		}
		res.more = (len(window) == limit || cut) && plan.sent > 0
		return nil
	})
	if errors.Is(err, errAbandoned) {
		return res, nil
	}
	if err != nil && r.recoverMarks(ctx, err, rows, results, plan) {
		res.more = true
		return res, nil
	}
	return res, err
}

// maxClaimRounds bounds the rounds, and so the broker round trips of a hot
// key, in one claim of a bucket.
const maxClaimRounds = 64

// leaseHeld reports whether this relay's lease of bucket has more than a
// quarter of its TTL left, enough to start another round.
func (r *Relay) leaseHeld(bucket int) bool {
	exp, ok := r.lease.owned[bucket]
	return ok && exp.Sub(r.now()) > r.cfg.LeaseTTL/4
}

// extraWindows is how many more windows of BatchSize rows an ordered relay
// reads in one bucket and cycle, past the keys of the first.
const extraWindows = 2

// readBucket locks and returns up to limit pending rows of bucket with ids
// above after, in id order, leaving out the keys in skip, without their
// bodies.
//
// It reads in two steps. A plain read finds the ids of the committed
// pending rows; the locking read then takes the rows up to the last of
// them, with as many as it found for LIMIT. The locking read thus waits,
// as it must, for every row in that range that another transaction holds
// (the previous owner's overrunning batch, a writer's uncommitted row),
// and stops at the last row it returns instead of reading on to the
// record that ends the range: InnoDB locks that record too, also under
// READ COMMITTED, and when it is the first pending row of the next
// bucket, the lock deadlocked with that bucket's owner marking its rows.
// (Only when a row found by the plain read is gone by the locking read
// does the scan read past the range, as it always did.)
func (r *Relay) readBucket(ctx context.Context, tx *gorm.DB, bucket int, after int64, skip map[string]bool, limit int) ([]*claimed, error) {
	where := func(q *gorm.DB) *gorm.DB {
		// Rows without a key that are not due (delayed, or backing off)
		// are left out: they hold nothing back, and a bucket full of
		// them must not fill the window.
		q = q.Where("status = ? AND bucket = ? AND id > ?", StatusPending, bucket, after).
			Where("sharding_key <> ? OR next_attempt_at <= UTC_TIMESTAMP(6)", "")
		if len(skip) > 0 {
			keys := make([]string, 0, len(skip))
			for k := range skip {
				keys = append(keys, k)
			}
			q = q.Where("sharding_key NOT IN ?", keys)
		}
		return q
	}
	var ids []int64
	tx = tx.WithContext(ctx)
	if err := find(tx, func(db *gorm.DB) *gorm.DB {
		return where(db.Table(r.table)).Select("id").Order("id").Limit(limit)
	}, &ids); err != nil {
		return nil, fmt.Errorf("outbox: claim from %s: %w", r.table, err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []*claimed
	if err := find(tx, func(db *gorm.DB) *gorm.DB {
		return where(db.Table(r.table).Select(r.columns()).
			Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})).
			Where("id <= ?", ids[len(ids)-1]).Order("id").Limit(len(ids))
	}, &rows); err != nil {
		return nil, fmt.Errorf("outbox: claim from %s: %w", r.table, err)
	}
	return rows, nil
}

// planRounds picks the rows of a bucket's batch that may be published now
// and splits them into rounds, each holding at most one row per sharding
// key, in id order. Publishing round by round means a row that fails can
// never be overtaken by a later row of its key within one Publish call,
// whatever the Publisher does with a partial failure.
//
// A keyed row holds back the later rows of its key while it is not due
// (delayed with txmsg.WithDelay, or backing off) or younger than
// SettleDelay: a key's events reach the broker in commit order, so a
// delayed event also delays the key's events committed after it. Rows
// without a key are all in the first round.
func (r *Relay) planRounds(rows []*Row, now time.Time, res *cycleResult) [][]int {
	settled := now.Add(-r.cfg.SettleDelay)
	held := map[string]bool{}
	perKey := map[string][]int{}
	var keys []string
	var unkeyed []int
	for i, row := range rows {
		k := row.ShardingKey
		switch {
		case k != "" && held[k]:
		case row.NextAttemptAt.After(now):
			if k != "" {
				held[k] = true
			}
			res.retryAt(now, row.NextAttemptAt)
		case k == "":
			unkeyed = append(unkeyed, i)
		case row.CreatedAt.After(settled):
			held[k] = true
			res.retryAt(now, row.CreatedAt.Add(r.cfg.SettleDelay))
		default:
			if _, ok := perKey[k]; !ok {
				keys = append(keys, k)
			}
			perKey[k] = append(perKey[k], i)
		}
	}
	var rounds [][]int
	for n := 0; ; n++ {
		var round []int
		if n == 0 {
			round = append(round, unkeyed...)
		}
		for _, k := range keys {
			if n < len(perKey[k]) {
				round = append(round, perKey[k][n])
			}
		}
		if len(round) == 0 {
			return rounds
		}
		rounds = append(rounds, round)
	}
}

package outbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// leaseState is what a relay knows of its bucket leases.
type leaseState struct {
	// owned maps each bucket this relay holds to the expiry it wrote.
	owned map[int]time.Time
	// next is when the leases are renewed next.
	next time.Time
	// ready means the lease rows exist.
	ready bool
	// cursor is the bucket an unordered claim starts from.
	cursor int
}

// usable returns the owned buckets whose lease has more than a quarter of
// its TTL left, so a batch started now ends well inside the lease. (A batch
// that overruns is still safe: the next owner's locking read waits for it.)
func (l *leaseState) usable(now time.Time, ttl time.Duration) []int {
	var out []int
	for b, exp := range l.owned {
		if exp.Sub(now) > ttl/4 {
			out = append(out, b)
		}
	}
	sort.Ints(out)
	return out
}

func (r *Relay) leaseTable() string { return r.cfg.Table + leaseSuffix }

// maintainLeases runs a lease round when one is due. Each relay aims at a
// fair share, ceil(buckets / live relays): it renews what it holds, hands
// a bucket over to a relay that asked for it when it holds more than its
// share, takes expired or free buckets, and, when still short, asks the
// busiest owners holding at least their share for buckets by writing its
// name into wanted_by. A relay
// counts as live while it holds a lease or renews an ask; an ask not
// renewed within LeaseTTL belongs to a relay presumed dead and is ignored,
// or it would shrink everyone's fair share and leave buckets unowned.
func (r *Relay) maintainLeases(ctx context.Context) error {
	now := time.Now().UTC()
	if now.Before(r.lease.next) {
		return nil
	}
	// A new session, so that each statement below starts from the table
	// alone instead of piling up the previous one's conditions.
	db := r.db.WithContext(ctx).Table(r.leaseTable()).Session(&gorm.Session{})
	if !r.lease.ready {
		if err := r.ensureLeaseRows(ctx); err != nil {
			return err
		}
		r.lease.ready = true
	}
	var all []Lease
	if err := db.Where("bucket < ?", r.cfg.Buckets).Order("bucket").Find(&all).Error; err != nil {
		return fmt.Errorf("outbox: read leases: %w", err)
	}
	now = time.Now().UTC()
	self := r.cfg.Name
	staleAsk := now.Add(-r.cfg.LeaseTTL)
	fresh := func(l Lease) bool { return l.WantedBy != "" && l.WantedAt.After(staleAsk) }
	members := map[string]bool{self: true}
	held := map[string]int{}
	for _, l := range all {
		if l.Owner != "" && l.ExpiresAt.After(now) {
			members[l.Owner] = true
			held[l.Owner]++
		}
		if fresh(l) {
			members[l.WantedBy] = true
		}
	}
	fair := (r.cfg.Buckets + len(members) - 1) / len(members)
	expires := now.Add(r.cfg.LeaseTTL)
	owned := map[int]time.Time{}
	var free, others []Lease
	for _, l := range all {
		switch {
		case l.Owner == self:
			if fresh(l) && l.WantedBy != self && held[self] > fair {
				// Hand over between batches: this relay holds no lock in the
				// bucket now.
				res := db.Where("bucket = ? AND owner = ?", l.Bucket, self).
					Updates(map[string]any{"owner": l.WantedBy, "expires_at": expires, "wanted_by": "", "wanted_at": time.Unix(1, 0).UTC()})
				if res.Error != nil {
					return fmt.Errorf("outbox: hand bucket %d over: %w", l.Bucket, res.Error)
				}
				held[self]--
				r.log.Info("bucket handed over", "bucket", l.Bucket, "to", l.WantedBy)
				continue
			}
			renew := map[string]any{"expires_at": expires}
			if l.WantedBy != "" && !fresh(l) {
				renew["wanted_by"] = "" // a dead relay's ask
			}
			res := db.Where("bucket = ? AND owner = ?", l.Bucket, self).Updates(renew)
			if res.Error != nil {
				return fmt.Errorf("outbox: renew lease of bucket %d: %w", l.Bucket, res.Error)
			}
			if res.RowsAffected == 1 {
				owned[l.Bucket] = expires
			}
		case l.Owner == "" || !l.ExpiresAt.After(now):
			free = append(free, l)
		default:
			others = append(others, l)
		}
	}
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, l := range free {
		if len(owned) >= fair {
			break
		}
		res := db.Where("bucket = ? AND (owner = '' OR expires_at <= ?)", l.Bucket, now).
			Updates(map[string]any{"owner": self, "expires_at": expires, "wanted_by": ""})
		if res.Error != nil {
			return fmt.Errorf("outbox: acquire bucket %d: %w", l.Bucket, res.Error)
		}
		if res.RowsAffected == 1 {
			owned[l.Bucket] = expires
			r.log.Debug("bucket acquired", "bucket", l.Bucket, "previous_owner", l.Owner)
		}
	}
	if short := fair - len(owned); short > 0 {
		// Ask the owners holding the most buckets, beyond their share
		// first. An ask of an owner holding just its share moves nothing,
		// but it keeps this relay counted as live: a relay that owns
		// nothing and asks nothing is invisible to the others, and with
		// enough of them the others' fair share stays too large.
		sort.SliceStable(others, func(i, j int) bool { return held[others[i].Owner] > held[others[j].Owner] })
		for _, l := range others {
			if short == 0 {
				break
			}
			if held[l.Owner] < fair {
				continue
			}
			// A new ask, a renewal of this relay's own, or one replacing a
			// stale ask.
			res := db.Where("bucket = ? AND owner = ? AND (wanted_by = '' OR wanted_by = ? OR wanted_at <= ?)", l.Bucket, l.Owner, self, staleAsk).
				Updates(map[string]any{"wanted_by": self, "wanted_at": now})
			if res.Error != nil {
				return fmt.Errorf("outbox: ask for bucket %d: %w", l.Bucket, res.Error)
			}
			if res.RowsAffected == 1 {
				held[l.Owner]--
				short--
			}
		}
	}
	r.lease.owned = owned
	r.lease.next = now.Add(r.cfg.LeaseTTL / 3)
	return nil
}

// ensureLeaseRows creates the lease rows of buckets [0, Buckets) and
// warns when the tables hold buckets beyond that, which means relays or
// writers disagree on Buckets.
func (r *Relay) ensureLeaseRows(ctx context.Context) error {
	db := r.db.WithContext(ctx)
	rows := make([]Lease, r.cfg.Buckets)
	for i := range rows {
		rows[i] = Lease{Bucket: i, ExpiresAt: time.Unix(0, 0).UTC(), WantedAt: time.Unix(1, 0).UTC()}
	}
	err := db.Table(r.leaseTable()).Clauses(clause.OnConflict{DoNothing: true}).Create(&rows).Error
	if err != nil {
		return fmt.Errorf("outbox: create lease rows in %s: %w", r.leaseTable(), err)
	}
	var maxBucket *int
	err = db.Table(r.cfg.Table).Where("status = ?", StatusPending).Select("MAX(bucket)").Scan(&maxBucket).Error
	if err != nil {
		return fmt.Errorf("outbox: check buckets in %s: %w", r.cfg.Table, err)
	}
	if maxBucket != nil && *maxBucket >= r.cfg.Buckets && !r.cfg.Ordered {
		r.log.Warn("pending rows use more buckets than this relay leases; the owner of bucket 0 claims them, so they are not spread over the relays",
			"buckets", r.cfg.Buckets, "max_bucket", *maxBucket)
	} else if maxBucket != nil && *maxBucket >= r.cfg.Buckets {
		r.log.Error("pending rows use more buckets than this relay leases; rows in the extra buckets wait until Buckets matches the Outbox's",
			"buckets", r.cfg.Buckets, "max_bucket", *maxBucket)
	}
	return nil
}

// releaseLeases gives up this relay's buckets when Run stops, so other
// relays take them at their next lease round instead of after the TTL.
func (r *Relay) releaseLeases(ctx context.Context) {
	if len(r.lease.owned) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := r.db.WithContext(ctx).Table(r.leaseTable()).Where("owner = ?", r.cfg.Name).
		Updates(map[string]any{"owner": "", "expires_at": time.Unix(0, 0).UTC()}).Error
	if err != nil {
		r.log.Warn("cannot release bucket leases; other relays take them when they expire", "err", err, "ttl", r.cfg.LeaseTTL)
	}
	r.lease.owned = map[int]time.Time{}
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/go-sql-driver/mysql"
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
	// registered means this relay has a row in the relay table, which it
	// deletes when Run returns; unregistered means the relay table was
	// missing at the last round (a warning was logged).
	registered, unregistered bool
	// noHealth means the relay table lacked the health columns at a round
	// (a table of an earlier release that Migrate has not updated yet): the
	// relay wrote its name and time only, and a warning was logged.
	noHealth bool
	// members and share are the live relays and this relay's share of the
	// buckets at the last round.
	members, share int
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

func (r *Relay) leaseTable() string { return r.table + leaseSuffix }

func (r *Relay) relayTable() string { return r.table + relaySuffix }

// forgetAfter is how many lease TTLs after its last round the row of a
// relay that died without deregistering is deleted from the relay table.
// Long after it stopped counting, it is only clutter.
const forgetAfter = 10

// maintainLeases runs a lease round when one is due.
//
// The relay first registers: it writes its name and the time into the
// relay table. The live relays are those the relay table has seen within
// LeaseTTL, the holders of unexpired leases and the relays with a fresh
// ask (wanted_by), the last two so that relays of earlier releases, which
// do not register, still count. Every relay thus knows at its next round
// how many relays there are, and the buckets are divided exactly: each
// relay's share is Buckets / live relays, and the remainder goes one each
// to the relays holding the most buckets (ties by name), so an even spread
// stays as it is (see shares).
//
// Then the relay renews the leases it holds up to its share and gives up
// the rest, handing each to a relay that asked for it and is short of its
// share, or freeing it; it does so between batches, holding no lock in the
// bucket. It takes expired or free buckets up to its share, and when still
// short asks owners at or above their share for buckets by writing its
// name into wanted_by (the busiest first): owners above their share hand
// them over at their next round; an ask of an owner at its share moves
// nothing but makes this relay visible to relays of earlier releases.
// An ask not renewed within LeaseTTL belongs to a relay presumed dead and
// is ignored. A relay at its share withdraws its asks.
//
// Every time two relays compare is the database's: leases expire, asks go
// stale and relays stop counting by UTC_TIMESTAMP(6), so neither the
// relays' clocks nor their DSNs' time zones (loc) matter. The relay keeps
// its own leases by its own clock, from before the round began.
func (r *Relay) maintainLeases(ctx context.Context) error {
	local := r.now()
	if local.Before(r.lease.next) {
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
	seen, err := r.register(ctx)
	if err != nil {
		return err
	}
	var all []Lease
	if err := db.Where("bucket < ?", r.buckets).Order("bucket").Find(&all).Error; err != nil {
		return fmt.Errorf("outbox: read leases: %w", err)
	}
	now, err := dbNow(ctx, r.db)
	if err != nil {
		return err
	}
	self := r.cfg.Name
	staleAsk := now.Add(-r.cfg.LeaseTTL)
	fresh := func(l Lease) bool { return l.WantedBy != "" && l.WantedAt.After(staleAsk) }
	members := map[string]bool{self: true}
	for _, m := range seen {
		if m.SeenAt.After(staleAsk) {
			members[m.Name] = true
		}
	}
	held := map[string]int{}
	asking := false
	for _, l := range all {
		if l.Owner != "" && l.ExpiresAt.After(now) {
			members[l.Owner] = true
			held[l.Owner]++
		}
		if fresh(l) {
			members[l.WantedBy] = true
		}
		asking = asking || l.WantedBy == self
	}
	share := shares(r.buckets, members, held)
	if len(members) != r.lease.members || share[self] != r.lease.share {
		r.log.Debug("fair share", "relays", len(members), "share", share[self])
		r.lease.members, r.lease.share = len(members), share[self]
	}
	expires := gorm.Expr("DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)", r.cfg.LeaseTTL.Microseconds())
	// This relay's own view of its leases: they end by its clock no later
	// than by the database's.
	mineUntil := local.Add(r.cfg.LeaseTTL)
	var mine, free, others []Lease
	for _, l := range all {
		switch {
		case l.Owner == self:
			mine = append(mine, l)
		case l.Owner == "" || !l.ExpiresAt.After(now):
			free = append(free, l)
		default:
			others = append(others, l)
		}
	}
	// shortAsker reports whether a fresh ask for l comes from a relay that
	// is short of its share.
	shortAsker := func(l Lease) bool {
		return fresh(l) && l.WantedBy != self && held[l.WantedBy] < share[l.WantedBy]
	}
	// Give up the buckets beyond this relay's share, those a short relay
	// asked for first.
	rand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
	sort.SliceStable(mine, func(i, j int) bool { return shortAsker(mine[i]) && !shortAsker(mine[j]) })
	excess := len(mine) - share[self]
	owned := map[int]time.Time{}
	for _, l := range mine {
		if excess > 0 {
			excess--
			// Between batches: this relay holds no lock in the bucket now.
			if shortAsker(l) {
				res := db.Where("bucket = ? AND owner = ?", l.Bucket, self).
					Updates(map[string]any{"owner": l.WantedBy, "expires_at": expires, "wanted_by": "", "wanted_at": time.Unix(1, 0).UTC()})
				if res.Error != nil {
					return fmt.Errorf("outbox: hand bucket %d over: %w", l.Bucket, res.Error)
				}
				if res.RowsAffected == 1 {
					held[l.WantedBy]++
					r.leaseMoves.Add(1)
					r.log.Info("bucket handed over", "bucket", l.Bucket, "to", l.WantedBy, "share", share[self])
				}
				continue
			}
			res := db.Where("bucket = ? AND owner = ?", l.Bucket, self).
				Updates(map[string]any{"owner": "", "expires_at": time.Unix(0, 0).UTC(), "wanted_by": "", "wanted_at": time.Unix(1, 0).UTC()})
			if res.Error != nil {
				return fmt.Errorf("outbox: release bucket %d: %w", l.Bucket, res.Error)
			}
			if res.RowsAffected == 1 {
				r.leaseMoves.Add(1)
				r.log.Info("bucket released: above this relay's share", "bucket", l.Bucket, "share", share[self], "relays", len(members))
			}
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
			owned[l.Bucket] = mineUntil
		}
	}
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, l := range free {
		if len(owned) >= share[self] {
			break
		}
		res := db.Where("bucket = ? AND (owner = '' OR expires_at <= UTC_TIMESTAMP(6))", l.Bucket).
			Updates(map[string]any{"owner": self, "expires_at": expires, "wanted_by": ""})
		if res.Error != nil {
			return fmt.Errorf("outbox: acquire bucket %d: %w", l.Bucket, res.Error)
		}
		if res.RowsAffected == 1 {
			owned[l.Bucket] = mineUntil
			r.log.Debug("bucket acquired", "bucket", l.Bucket, "previous_owner", l.Owner)
		}
	}
	short := share[self] - len(owned)
	if short > 0 {
		// Ask the owners holding the most buckets beyond their share
		// first. An ask of an owner holding just its share moves nothing,
		// but it keeps this relay counted as live by relays of earlier
		// releases, which do not read the relay table.
		sort.SliceStable(others, func(i, j int) bool {
			return held[others[i].Owner]-share[others[i].Owner] > held[others[j].Owner]-share[others[j].Owner]
		})
		for _, l := range others {
			if short == 0 {
				break
			}
			if held[l.Owner] < share[l.Owner] {
				continue
			}
			// A new ask, a renewal of this relay's own, or one replacing a
			// stale ask.
			res := db.Where("bucket = ? AND owner = ? AND (wanted_by = '' OR wanted_by = ? OR wanted_at <= DATE_SUB(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND))",
				l.Bucket, l.Owner, self, r.cfg.LeaseTTL.Microseconds()).
				Updates(map[string]any{"wanted_by": self, "wanted_at": gorm.Expr("UTC_TIMESTAMP(6)")})
			if res.Error != nil {
				return fmt.Errorf("outbox: ask for bucket %d: %w", l.Bucket, res.Error)
			}
			if res.RowsAffected == 1 {
				held[l.Owner]--
				short--
			}
		}
	} else if asking {
		// At its share: asks left from earlier rounds would only make an
		// owner hand over a bucket this relay does not need.
		res := db.Where("bucket < ? AND wanted_by = ?", r.buckets, self).
			Updates(map[string]any{"wanted_by": "", "wanted_at": time.Unix(1, 0).UTC()})
		if res.Error != nil {
			return fmt.Errorf("outbox: withdraw asks: %w", res.Error)
		}
	}
	r.forget(ctx, seen, now)
	r.lease.owned = owned
	r.lease.next = local.Add(r.cfg.LeaseTTL / 3)
	r.leaseRounds.Add(1)
	return nil
}

// shares divides buckets between the live relays: each gets
// buckets / relays, and the remainder goes one each to the relays holding
// the most buckets now, ties broken by name. Every relay computes the same
// shares from the same rows, the shares add up to buckets, and a spread
// that is already even is left as it is.
func shares(buckets int, members map[string]bool, held map[string]int) map[string]int {
	names := make([]string, 0, len(members))
	for n := range members {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if held[names[i]] != held[names[j]] {
			return held[names[i]] > held[names[j]]
		}
		return names[i] < names[j]
	})
	base, extra := buckets/len(names), buckets%len(names)
	out := make(map[string]int, len(names))
	for i, n := range names {
		out[n] = base
		if i < extra {
			out[n]++
		}
	}
	return out
}

// register writes this relay's row, with the database's time, into the
// relay table and returns the table's rows. While the relay table does not
// exist (tables of an earlier release that Migrate has not updated yet) it
// warns once and returns none: the relays are then counted from the lease
// rows alone, as earlier releases do.
func (r *Relay) register(ctx context.Context) ([]Member, error) {
	db := r.db.WithContext(ctx).Table(r.relayTable()).Session(&gorm.Session{})
	err := r.writeMember(db)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == errBadField {
		if !r.lease.noHealth {
			r.log.Warn("the relay table lacks the health columns; run Outbox.Migrate (or txmsgctl migrate). Until then Outbox.Relays and the dashboard cannot show this relay failing",
				"relay_table", r.relayTable())
		}
		r.lease.noHealth = true
		err = db.Exec("INSERT INTO `"+r.relayTable()+"` (name, seen_at) VALUES (?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE seen_at = UTC_TIMESTAMP(6)",
			r.cfg.Name).Error
	}
	switch {
	case errors.As(err, &me) && me.Number == errNoSuchTable:
		if !r.lease.unregistered {
			r.log.Warn("the relay table is missing; run Outbox.Migrate (or txmsgctl migrate). Until then relays are counted from the lease table alone, and leases spread slowly over many relays",
				"relay_table", r.relayTable())
		}
		r.lease.unregistered = true
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("outbox: register in %s: %w", r.relayTable(), err)
	}
	r.lease.unregistered = false
	r.lease.registered = true
	var seen []Member
	if err := db.Find(&seen).Error; err != nil {
		return nil, fmt.Errorf("outbox: read %s: %w", r.relayTable(), err)
	}
	return seen, nil
}

// errNoSuchTable is MySQL's ER_NO_SUCH_TABLE, and errBadField its
// ER_BAD_FIELD_ERROR (unknown column).
const (
	errNoSuchTable = 1146
	errBadField    = 1054
)

// writeMember writes this relay's row of the relay table: the time of
// the round, its LeaseTTL, and its health, as Health reports it. The
// start of an outage, which the relay knows by its own clock, is written
// as the database's time that long ago.
func (r *Relay) writeMember(db *gorm.DB) error {
	var down bool
	var downFor time.Duration
	var lastErr string
	if o := r.unavailable.Load(); o != nil {
		down, downFor, lastErr = true, max(time.Since(o.since), 0), truncate(o.err, maxMemberError)
	}
	since := "IF(?, DATE_SUB(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND), NULL)"
	return db.Exec("INSERT INTO `"+r.relayTable()+"` (name, seen_at, lease_ttl_us, unavailable_since, last_error) VALUES (?, UTC_TIMESTAMP(6), ?, "+since+", ?)"+
		" ON DUPLICATE KEY UPDATE seen_at = UTC_TIMESTAMP(6), lease_ttl_us = ?, unavailable_since = "+since+", last_error = ?",
		r.cfg.Name, r.cfg.LeaseTTL.Microseconds(), down, downFor.Microseconds(), lastErr,
		r.cfg.LeaseTTL.Microseconds(), down, downFor.Microseconds(), lastErr).Error
}

// forget deletes the rows of relays not seen for forgetAfter lease TTLs:
// relays that died without deregistering. A failure only leaves them for
// a later round.
func (r *Relay) forget(ctx context.Context, seen []Member, now time.Time) {
	cutoff := now.Add(-forgetAfter * r.cfg.LeaseTTL)
	for _, m := range seen {
		if m.SeenAt.Before(cutoff) {
			err := r.db.WithContext(ctx).Table(r.relayTable()).
				Where("seen_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)", (forgetAfter * r.cfg.LeaseTTL).Microseconds()).
				Delete(&Member{}).Error
			if err != nil {
				r.log.Warn("cannot delete the rows of relays long gone", "err", err, "relay_table", r.relayTable())
			}
			return
		}
	}
}

// ensureLeaseRows creates the lease rows of buckets [0, Buckets) and
// warns when the tables hold buckets beyond that, which means relays or
// writers disagree on Buckets.
func (r *Relay) ensureLeaseRows(ctx context.Context) error {
	db := r.db.WithContext(ctx)
	rows := make([]Lease, r.buckets)
	for i := range rows {
		rows[i] = Lease{Bucket: i, ExpiresAt: time.Unix(0, 0).UTC(), WantedAt: time.Unix(1, 0).UTC()}
	}
	err := db.Table(r.leaseTable()).Clauses(clause.OnConflict{DoNothing: true}).Create(&rows).Error
	if err != nil {
		return fmt.Errorf("outbox: create lease rows in %s: %w", r.leaseTable(), err)
	}
	var maxBucket *int
	err = db.Table(r.table).Where("status = ?", StatusPending).Select("MAX(bucket)").Scan(&maxBucket).Error
	if err != nil {
		return fmt.Errorf("outbox: check buckets in %s: %w", r.table, err)
	}
	if maxBucket != nil && *maxBucket >= r.buckets && !r.cfg.Ordered {
		r.log.Warn("pending rows use more buckets than this relay leases; the owner of bucket 0 claims them, so they are not spread over the relays",
			"buckets", r.buckets, "max_bucket", *maxBucket)
	} else if maxBucket != nil && *maxBucket >= r.buckets {
		r.log.Error("pending rows use more buckets than this relay leases; rows in the extra buckets wait until Buckets matches the Outbox's",
			"buckets", r.buckets, "max_bucket", *maxBucket)
	}
	return nil
}

// releaseLeases gives up this relay's buckets and deletes its row from
// the relay table when Run stops, so other relays take the buckets at
// their next lease round instead of after the TTL, and count one relay
// fewer at once.
func (r *Relay) releaseLeases(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if len(r.lease.owned) > 0 {
		err := r.db.WithContext(ctx).Table(r.leaseTable()).Where("owner = ?", r.cfg.Name).
			Updates(map[string]any{"owner": "", "expires_at": time.Unix(0, 0).UTC()}).Error
		if err != nil {
			r.log.Warn("cannot release bucket leases; other relays take them when they expire", "err", err, "ttl", r.cfg.LeaseTTL)
		}
		r.lease.owned = map[int]time.Time{}
	}
	if r.lease.registered {
		err := r.db.WithContext(ctx).Table(r.relayTable()).Where("name = ?", r.cfg.Name).Delete(&Member{}).Error
		if err != nil {
			r.log.Warn("cannot deregister; other relays stop counting this one after the lease TTL", "err", err, "ttl", r.cfg.LeaseTTL)
		}
		r.lease.registered = false
	}
}

// dbNow returns the database's clock, UTC_TIMESTAMP(6), read as the
// handle reads every DATETIME: compared with the times the tables hold,
// it gives the same answer whatever the handle's time zone (loc) and the
// host's clock. It reads the primary's clock: in a transaction, which
// read/write splitting (gorm's dbresolver, ProxySQL) sends to the primary;
// a replica is another host, with a clock of its own.
func dbNow(ctx context.Context, db *gorm.DB) (time.Time, error) {
	var now time.Time
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return tx.Raw("SELECT UTC_TIMESTAMP(6)").Row().Scan(&now)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("outbox: read the database's clock: %w", err)
	}
	return now, nil
}

package outbox

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// trackOutage updates the relay's view of a broker outage after a cycle:
// a cycle whose publishes only waited for the broker extends it (and the
// backoff of the rows that wait); one that published and waited for
// nothing ends it, and so does one that tried nothing while no row of the
// table waits for the broker any more (another relay may have published
// them, or taken this relay's buckets).
//
// The first cycle of an outage that publishes again makes the rows of
// the relay's buckets that still wait for the broker due at once; then
// trackOutage returns true: the next cycle should start now. A relay
// whose publishes have failed for HandOverAfter hands its buckets over
// (see handOver); its outage then ends only when it publishes again.
func (r *Relay) trackOutage(ctx context.Context) (again bool) {
	c := r.cycle
	if c.sent > 0 {
		r.standby.probing = false
	}
	defer r.handOverIfCutOff(ctx)
	if c.sent > 0 && r.outage.streak > 0 && !r.outage.released {
		r.outage.released = true
		again = r.releaseWaiting(ctx, "the relay publishes again") > 0
	}
	switch {
	case c.waiting > 0 && c.sent == 0:
		if r.outage.streak == 0 {
			r.outage.since = time.Now()
			r.outage.released = false
			r.outage.wait = 0
			r.log.Warn("broker unavailable; pending rows wait for it without counting attempts", "waiting", c.waiting, "err", c.err)
		}
		r.outage.streak++
		r.outage.wait++
		r.unavailable.Store(&outageState{since: r.outage.since, waiting: c.waiting, err: c.err.Error()})
	case c.waiting == 0 && r.outage.streak > 0 && (c.sent > 0 || (r.standby.until.IsZero() && !r.rowsWaiting(ctx))):
		r.log.Info("broker available again", "unavailable_for", time.Since(r.outage.since).Round(time.Millisecond))
		r.outage.streak, r.outage.wait = 0, 0
		r.unavailable.Store(nil)
	}
	return again
}

// handOverIfCutOff hands the relay's buckets over when its last cycle
// only waited for the broker and its publishes have failed for
// HandOverAfter, or since it joined the lease rounds again after handing
// them over. A relay that reaches the database but not the broker would
// otherwise renew its leases, and keep its rows and keys from the other
// relays, for as long as the outage lasts. It does so only while another
// relay is live (a relay alone has nobody to hand them to) and holds no
// marks to apply again (which need its leases).
//
// The relay releases its leases, withdraws its asks and deletes its row
// of the relay table, all between batches, holding no lock in any bucket:
// the other relays count one relay fewer and take the buckets at their
// next lease round. It then runs no lease round and claims nothing until
// HandOverAfter has passed or its publisher signals a broker's return;
// Health reports the outage all along.
func (r *Relay) handOverIfCutOff(ctx context.Context) {
	c, o := r.cycle, &r.outage
	if r.cfg.HandOverAfter < 0 || c.waiting == 0 || c.sent > 0 || !r.standby.until.IsZero() || r.unmarked != nil || ctx.Err() != nil {
		return
	}
	if !r.standby.probing && time.Since(o.since) < r.cfg.HandOverAfter {
		return
	}
	if r.lease.members < 2 {
		return
	}
	held := len(r.lease.owned)
	r.releaseLeases(ctx)
	err := r.db.WithContext(ctx).Table(r.leaseTable()).Where("bucket < ? AND wanted_by = ?", r.buckets, r.cfg.Name).
		Updates(map[string]any{"wanted_by": "", "wanted_at": time.Unix(1, 0).UTC()}).Error
	if err != nil {
		r.log.Warn("cannot withdraw this relay's asks for buckets; they lapse after the lease TTL", "err", err)
	}
	r.lease.next = time.Time{}
	r.standby.until = time.Now().Add(r.cfg.HandOverAfter)
	r.standby.probing = false
	r.log.Warn("broker unavailable for too long; buckets handed to the other relays",
		"unavailable_for", time.Since(o.since).Round(time.Millisecond), "buckets", held, "relays", r.lease.members,
		"rejoin_in", r.cfg.HandOverAfter, "err", c.err)
	if s := r.unavailable.Load(); s != nil {
		next := *s
		next.rejoin = r.standby.until
		r.unavailable.Store(&next)
	}
}

// rejoin ends the relay's standby: it joins the lease rounds at its next
// cycle, and hands the buckets it gets over again at once if its
// publishes still fail.
func (r *Relay) rejoin(why string) {
	r.standby.until = time.Time{}
	r.standby.probing = true
	r.log.Info("joining the lease rounds again to try the broker", "why", why)
	if s := r.unavailable.Load(); s != nil {
		next := *s
		next.rejoin = time.Time{}
		r.unavailable.Store(&next)
	}
}

// releaseLimit bounds the rows one release makes due, in batches of the
// relay: enough to keep it busy; the rest are due within MaxWaitBackoff.
const releaseLimit = 20

// releaseWaiting makes the pending rows of the relay's buckets that wait
// for the broker due now, at most releaseLimit batches of them, and
// returns how many it released. Only the relay's own buckets: their rows
// are claimed by this relay alone, so the update waits for no other
// relay's claim, and each relay releases its rows when it sees the broker
// back. Key order is kept in ordered mode: next_attempt_at only says when
// a row may go, never which row of a key goes first. A failure is logged
// and otherwise ignored: the rows are due within MaxWaitBackoff anyway.
func (r *Relay) releaseWaiting(ctx context.Context, why string) int64 {
	owned := r.lease.usable(r.now(), r.cfg.LeaseTTL)
	if len(owned) == 0 || ctx.Err() != nil {
		return 0
	}
	res := r.db.WithContext(ctx).Table(r.table).
		Where("status = ? AND last_error LIKE ? AND next_attempt_at > UTC_TIMESTAMP(6)", StatusPending, waitingPrefix+"%").
		Where(r.inBuckets(r.db, owned)).
		Limit(releaseLimit*r.cfg.BatchSize).
		Update("next_attempt_at", gorm.Expr("UTC_TIMESTAMP(6)"))
	if res.Error != nil {
		if ctx.Err() == nil {
			r.log.Warn("cannot retry the rows waiting for the broker now; they retry on their own schedule", "why", why, "err", res.Error)
		}
		return 0
	}
	if res.RowsAffected > 0 {
		r.log.Info("retrying the rows waiting for the broker now", "why", why, "rows", res.RowsAffected)
	}
	return res.RowsAffected
}

// rowsWaiting reports whether a pending row of the table waits for the
// broker; on a database error it says yes, so that Health keeps the
// outage it knows of.
func (r *Relay) rowsWaiting(ctx context.Context) bool {
	var ids []int64
	err := r.db.WithContext(ctx).Table(r.table).
		Where("status = ? AND last_error LIKE ?", StatusPending, waitingPrefix+"%").
		Limit(1).Pluck("id", &ids).Error
	return err != nil || len(ids) > 0
}

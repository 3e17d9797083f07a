package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/txmsg/txmsg/adapters/outbox"
)

// waitFresh waits until, in every mode, an event of a transaction begun
// at or after since has been handled, and returns how long after since
// that was for the slowest mode.
func (r *runner) waitFresh(ctx context.Context, since time.Time, timeout time.Duration) (time.Duration, string, error) {
	rec, err := r.waitRecovered(ctx, since, timeout, false)
	return rec.fresh, rec.slowest, err
}

// recovery is how the pipeline came back after a fault.
type recovery struct {
	fresh    time.Duration // until fresh work was handled in every mode
	caughtUp time.Duration // until every order committed before the fault's end was handled
	slowest  string        // the mode that took longest to carry fresh work
}

// waitRecovered waits until fresh work flows end to end in every mode and,
// with backlog, until the orders committed before since are all handled.
func (r *runner) waitRecovered(ctx context.Context, since time.Time, timeout time.Duration, backlog bool) (recovery, error) {
	deadline := time.Now().Add(timeout)
	var rec recovery
	fresh, caughtUp := false, !backlog
	for {
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		db := r.db.WithContext(qctx)
		if !fresh {
			var rows []struct {
				Mode  string
				First time.Time
			}
			err := db.Table(effectsTable).Select("mode, MIN(handled_at) AS first").
				Where("order_created_at >= ?", since.UTC()).Group("mode").Scan(&rows).Error
			if err == nil && len(rows) == len(modes) {
				fresh = true
				for _, row := range rows {
					if d := row.First.Sub(since); d >= rec.fresh {
						rec.fresh, rec.slowest = d, row.Mode
					}
				}
			}
		}
		if !caughtUp {
			var missing int64
			err := db.Raw("SELECT COUNT(*) FROM "+ordersTable+" o WHERE o.created_at >= ? AND o.created_at < ?"+
				" AND NOT EXISTS (SELECT 1 FROM "+effectsTable+" e WHERE e.msg_id = o.id)",
				since.Add(-10*time.Minute).UTC(), since.UTC()).Scan(&missing).Error
			if err == nil && missing == 0 {
				caughtUp = true
				rec.caughtUp = time.Since(since)
			}
		}
		cancel()
		if fresh && caughtUp {
			return rec, nil
		}
		if ctx.Err() != nil {
			return rec, ctx.Err()
		}
		if time.Now().After(deadline) {
			return rec, fmt.Errorf("fresh work handled in both modes: %v; earlier orders all handled: %v", fresh, caughtUp)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// drain waits until no outbox row is pending and every committed order
// has its effect, or the drain deadline passes.
func (r *runner) drain(ctx context.Context) bool {
	deadline := time.Now().Add(r.cfg.Drain)
	var lastLog time.Time
	for {
		pending, missing, err := r.backlog(ctx)
		if err == nil && pending == 0 && missing == 0 {
			r.logf("drained: no outbox row pending, every committed order handled")
			return true
		}
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			if err != nil {
				r.logf("draining: %v", err)
			} else {
				r.logf("draining: %d outbox rows pending, %d committed orders not handled yet", pending, missing)
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			r.logf("NOT drained after %s: %s", r.cfg.Drain, r.diagnose(context.WithoutCancel(ctx)))
			return false
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

func (r *runner) backlog(ctx context.Context) (pending, missing int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	db := r.db.WithContext(ctx)
	if err := db.Table(outbox.DefaultTable).Where("status = ?", outbox.StatusPending).Count(&pending).Error; err != nil {
		return 0, 0, err
	}
	err = db.Raw("SELECT COUNT(*) FROM " + ordersTable + " o WHERE NOT EXISTS (SELECT 1 FROM " + effectsTable + " e WHERE e.msg_id = o.id)").
		Scan(&missing).Error
	return pending, missing, err
}

// diagnose describes what is stuck: orders not handled per mode, and the
// pending outbox rows per bucket with the bucket's lease.
func (r *runner) diagnose(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	db := r.db.WithContext(ctx)
	var unhandled []struct {
		Mode   string
		N      int
		Oldest time.Time
	}
	err := db.Raw("SELECT o.mode, COUNT(*) AS n, MIN(o.created_at) AS oldest FROM " + ordersTable + " o" +
		" WHERE NOT EXISTS (SELECT 1 FROM " + effectsTable + " e WHERE e.msg_id = o.id) GROUP BY o.mode").Scan(&unhandled).Error
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, u := range unhandled {
		parts = append(parts, fmt.Sprintf("%d %s orders not handled (oldest %s ago)", u.N, u.Mode, time.Since(u.Oldest).Round(time.Second)))
	}
	var buckets []struct {
		Bucket    int
		N         int
		Owner     string
		ExpiresAt time.Time
		WantedBy  string
	}
	err = db.Raw("SELECT o.bucket, COUNT(*) AS n, l.owner, l.expires_at, l.wanted_by FROM "+outbox.DefaultTable+" o"+
		" LEFT JOIN "+outbox.DefaultTable+"_lease l ON l.bucket = o.bucket WHERE o.status = ?"+
		" GROUP BY o.bucket, l.owner, l.expires_at, l.wanted_by ORDER BY o.bucket", outbox.StatusPending).Scan(&buckets).Error
	if err != nil {
		return strings.Join(append(parts, err.Error()), "; ")
	}
	for _, b := range buckets {
		state := "expired"
		if d := time.Until(b.ExpiresAt); d > 0 {
			state = "expires in " + d.Round(100*time.Millisecond).String()
		}
		parts = append(parts, fmt.Sprintf("bucket %d: %d pending, lease %q %s, wanted by %q", b.Bucket, b.N, b.Owner, state, b.WantedBy))
	}
	if len(parts) == 0 {
		return "nothing pending"
	}
	return strings.Join(parts, "; ")
}

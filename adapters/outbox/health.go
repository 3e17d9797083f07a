package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/txmsg/txmsg/txmsg"
)

// ErrLagging means the relays fall behind: the oldest pending row is older
// than [RelayConfig.MaxLag]. The broker may be failing (rows back off), the
// relays may be too few or stopped, or a row keeps failing until it is
// parked.
var ErrLagging = errors.New("outbox: relay is lagging")

// Health reports whether the relay is keeping up: Run is running, its
// publishes reach the broker, the database answers, and the oldest pending
// row of the table is at most MaxLag old. It returns nil when healthy;
// otherwise an error naming the failing part, wrapping
// [txmsg.ErrUnavailable] while the relay's publishes fail because the
// broker or the route is unavailable (from the first cycle that only
// waited for the broker to the first that published again), and
// [ErrLagging] for lag. A relay that has handed its buckets over for
// being cut off from the broker (see [RelayConfig.HandOverAfter]) says
// so, wrapping txmsg.ErrUnavailable, while it stands by. It is meant for readiness
// and liveness probes and costs one query over the pending rows, bounded
// by ctx.
//
// Lag is measured over the whole table, so every relay of a table reports
// it; a row held back by its own failures counts too, until it is parked.
//
// Health reports this process's relay only: a relay of another replica
// that cannot reach the broker leaves it green (until the lag passes
// MaxLag). Each relay writes its health into the relay table at every
// lease round; [Outbox.Relays] reads every relay's from any process.
func (r *Relay) Health(ctx context.Context) error {
	if !r.running.Load() {
		return fmt.Errorf("outbox: relay %s is not running: %w", r.cfg.Name, txmsg.ErrNotStarted)
	}
	if o := r.unavailable.Load(); o != nil {
		if !o.rejoin.IsZero() {
			return fmt.Errorf("%w: relay %s cannot reach the broker since %s (%s) and has handed its buckets to the other relays; it tries again at %s: %s",
				txmsg.ErrUnavailable, r.cfg.Name, o.since.UTC().Format(time.RFC3339), time.Since(o.since).Round(time.Second),
				o.rejoin.UTC().Format(time.RFC3339), o.err)
		}
		return fmt.Errorf("%w: relay %s cannot reach the broker since %s (%s); %d rows wait without counting attempts: %s",
			txmsg.ErrUnavailable, r.cfg.Name, o.since.UTC().Format(time.RFC3339), time.Since(o.since).Round(time.Second), o.waiting, o.err)
	}
	// The lag by the database's clock, with which created_at is written.
	var row struct{ Lag sql.NullInt64 }
	err := r.db.WithContext(ctx).Table(r.table).Where("status = ?", StatusPending).
		Select("TIMESTAMPDIFF(MICROSECOND, MIN(created_at), " + dbClock + ") AS lag").Scan(&row).Error
	if err != nil {
		return fmt.Errorf("outbox: relay %s: database: %w", r.cfg.Name, err)
	}
	if r.cfg.MaxLag < 0 || !row.Lag.Valid {
		return nil
	}
	if lag := time.Duration(row.Lag.Int64) * time.Microsecond; lag > r.cfg.MaxLag {
		return fmt.Errorf("%w: the oldest pending row of %s is %s old (MaxLag %s)", ErrLagging, r.table, lag.Round(time.Second), r.cfg.MaxLag)
	}
	return nil
}

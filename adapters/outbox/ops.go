package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// Stats is a snapshot of the outbox table.
type Stats struct {
	// Pending, Sent and Parked count the rows in each status.
	Pending, Sent, Parked int64
	// OldestPending is the age of the oldest pending row; zero when none
	// is pending. A delayed row (txmsg.WithDelay) counts from its due
	// time, so rows waiting to be due do not age. A growing value means
	// the relays fall behind or the broker is failing. Pending includes
	// the delayed rows not due yet.
	OldestPending time.Duration
	// Waiting counts the pending rows whose last publish failed because
	// the broker or the route was unavailable. They count no attempt and
	// are never parked; they go out when the broker is back.
	Waiting int64
}

// Stats counts the rows by status, the pending rows waiting for the
// broker, and measures the oldest pending row by the database's clock, in
// one statement.
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var groups []struct {
		Status  Status
		N       int64
		Age     sql.NullInt64
		Waiting int64
	}
	stats := func(since string) error {
		return o.q.WithContext(ctx).Table(o.cfg.Table).
			Select("status, COUNT(*) AS n, TIMESTAMPDIFF(MICROSECOND, MIN("+since+"), "+dbClock+") AS age, "+
				"COALESCE(SUM(last_error LIKE ?), 0) AS waiting", waitingPrefix+"%").
			Group("status").Scan(&groups).Error
	}
	err := stats("COALESCE(deliver_at, created_at)")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == errBadField {
		// A table Migrate has not given deliver_at yet holds no delayed
		// rows.
		groups = nil
		err = stats("created_at")
	}
	if err != nil {
		return s, fmt.Errorf("outbox: stats of %s: %w", o.cfg.Table, err)
	}
	for _, g := range groups {
		switch g.Status {
		case StatusPending:
			s.Pending = g.N
			s.Waiting = g.Waiting
			if g.Age.Valid {
				s.OldestPending = max(time.Duration(g.Age.Int64)*time.Microsecond, 0)
			}
		case StatusSent:
			s.Sent = g.N
		case StatusParked:
			s.Parked = g.N
		}
	}
	return s, nil
}

// Requeue makes the parked rows with the given txmsg IDs pending again
// with zero attempts, and wakes the relays. IDs that are not parked are
// ignored. It returns how many rows it requeued. In ordered mode a
// requeued row is published after the rows of its key that went out while
// it was parked.
func (o *Outbox) Requeue(ctx context.Context, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	now := gorm.Expr(dbClock)
	res := o.q.WithContext(ctx).Table(o.cfg.Table).
		Where("status = ? AND msg_id IN ?", StatusParked, ids).
		Updates(map[string]any{
			"status":          StatusPending,
			"attempts":        0,
			"next_attempt_at": now,
			"updated_at":      now,
		})
	if res.Error != nil {
		return 0, fmt.Errorf("outbox: requeue in %s: %w", o.cfg.Table, res.Error)
	}
	if res.RowsAffected > 0 {
		o.log.Info("requeued parked rows", "rows", res.RowsAffected, "txmsg_ids", ids, "state", StatusPending)
		o.Notify()
	}
	return res.RowsAffected, nil
}

// DeleteParked deletes the parked rows with the given txmsg IDs and
// returns how many it deleted; rows in another status are left alone, in the same
// statement, so a row requeued meanwhile is kept. Their messages are never
// published.
func (o *Outbox) DeleteParked(ctx context.Context, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	res := o.q.WithContext(ctx).Table(o.cfg.Table).Where("status = ? AND msg_id IN ?", StatusParked, ids).Delete(map[string]any{})
	if res.Error != nil {
		return 0, fmt.Errorf("outbox: delete parked rows of %s: %w", o.cfg.Table, res.Error)
	}
	if res.RowsAffected > 0 {
		o.log.Info("deleted parked rows", "rows", res.RowsAffected, "txmsg_ids", ids)
	}
	return res.RowsAffected, nil
}

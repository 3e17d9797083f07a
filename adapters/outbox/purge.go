package outbox

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/internal/store"
)

// Purge deletes sent rows that were sent more than olderThan ago, in
// batches of batch rows (0 means [txmsg.DefaultPurgeBatch]), and returns how many it deleted.
// Relays do this by themselves after [RelayConfig.Retention].
func (o *Outbox) Purge(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	return o.purge(ctx, StatusSent, olderThan, batch)
}

// PurgeParked deletes parked rows that were parked more than olderThan ago, in
// batches of batch rows (0 means [txmsg.DefaultPurgeBatch]), and returns how many it deleted.
// Their messages are never published.
func (o *Outbox) PurgeParked(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	return o.purge(ctx, StatusParked, olderThan, batch)
}

func (o *Outbox) purge(ctx context.Context, status Status, olderThan time.Duration, batch int) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("outbox: purge needs an age of zero or more, not %v", olderThan)
	}
	now, err := dbNow(ctx, o.q)
	if err != nil {
		return 0, err
	}
	n, err := purgeRows(ctx, o.q, o.cfg.Table, status, now.Add(-olderThan), batch)
	if n > 0 {
		o.log.Info("purged rows", "rows", n, "state", status, "older_than", olderThan)
	}
	return n, err
}

// purgeRows deletes rows of status last updated before cutoff.
func purgeRows(ctx context.Context, db *gorm.DB, table string, status Status, cutoff time.Time, batch int) (int64, error) {
	n, err := store.PurgeBefore(ctx, db, table, "id", "updated_at", cutoff, batch,
		clause.Eq{Column: clause.Column{Name: "status"}, Value: status})
	if err != nil {
		return n, fmt.Errorf("outbox: %w", err)
	}
	return n, nil
}

// purgeSent deletes sent rows older than Retention by the database's
// clock, with which their updated_at was written.
func (r *Relay) purgeSent(ctx context.Context) (int64, error) {
	now, err := dbNow(ctx, r.db)
	if err != nil {
		return 0, err
	}
	return purgeRows(ctx, r.db, r.table, StatusSent, now.Add(-r.cfg.Retention), r.cfg.PurgeBatch)
}

// purgeLoop deletes sent rows older than Retention, at start and every
// PurgeInterval, until ctx ends. Several relays may purge at once: each
// statement deletes a small batch by primary key, so they only share work.
func (r *Relay) purgeLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.PurgeInterval)
	defer t.Stop()
	for {
		n, err := r.purgeSent(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.log.Warn("purging sent rows failed; will retry", "err", err, "retry_in", r.cfg.PurgeInterval)
		case n > 0:
			r.log.Debug("purged sent rows", "rows", n, "retention", r.cfg.Retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Package heartbeat writes a component's row of the instance table (see
// package fleet) every interval: its health, its last error and its
// counters. Every RocketMQ component of txmsg runs one between Start and
// Close.
package heartbeat

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/txmsg"
)

// maxError bounds the stored last error.
const maxError = 1024

// expireEvery is how many heartbeats pass between two deletions of
// expired rows.
const expireEvery = 6

// Counters are a component's counts, safe for concurrent use. The zero
// value is ready.
type Counters struct {
	sent, handled, duplicates, parked, failed, swept atomic.Int64
	commit, rollback, unknown                        atomic.Int64
}

// Snapshot returns the counts so far.
func (c *Counters) Snapshot() fleet.Counts {
	return fleet.Counts{Sent: c.sent.Load(), Handled: c.handled.Load(), Duplicates: c.duplicates.Load(),
		Parked: c.parked.Load(), Failed: c.failed.Load(), Swept: c.swept.Load(),
		CheckBackCommit: c.commit.Load(), CheckBackRollback: c.rollback.Load(), CheckBackUnknown: c.unknown.Load()}
}

// Consumed counts one delivery's result.
func (c *Counters) Consumed(outcome txmsg.Outcome, err error) {
	switch {
	case err != nil:
		c.failed.Add(1)
	case outcome == txmsg.OutcomeHandled:
		c.handled.Add(1)
	case outcome == txmsg.OutcomeDuplicate:
		c.duplicates.Add(1)
	case outcome == txmsg.OutcomeParked:
		c.parked.Add(1)
	}
}

// Sent counts a message sent, Swept a republished half message, Failed
// one failed attempt, Parked one parked message.
func (c *Counters) Sent()   { c.sent.Add(1) }
func (c *Counters) Swept()  { c.swept.Add(1) }
func (c *Counters) Failed() { c.failed.Add(1) }
func (c *Counters) Parked() { c.parked.Add(1) }

// OnHalfSent implements txmsg.HookHalfSent: a failed half send counts as
// Failed.
func (c *Counters) OnHalfSent(_ context.Context, _ *txmsg.Message, err error, _ time.Duration) {
	if err != nil {
		c.failed.Add(1)
	}
}

// OnLocalDone implements txmsg.HookLocalDone: a commit counts as Sent,
// anything else as Failed.
func (c *Counters) OnLocalDone(_ context.Context, _ *txmsg.Message, state txmsg.LocalState, _ error, _ time.Duration) {
	if state == txmsg.StateCommitted {
		c.sent.Add(1)
	} else {
		c.failed.Add(1)
	}
}

// OnCheckBack implements txmsg.HookCheckBack: the answers by state.
func (c *Counters) OnCheckBack(_, _, _ string, state txmsg.LocalState, _ error, _ time.Duration) {
	switch state {
	case txmsg.StateCommitted:
		c.commit.Add(1)
	case txmsg.StateRolledBack:
		c.rollback.Add(1)
	default:
		c.unknown.Add(1)
	}
}

// Beat is a running heartbeat. A nil *Beat does nothing.
type Beat struct {
	db     *gorm.DB
	cfg    fleet.Config
	kind   string
	name   string
	id     string
	health func(context.Context) error
	counts *Counters
	log    *slog.Logger

	// ctx ends at Stop: it bounds the heartbeat in progress.
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}
}

// Start writes the first heartbeat of the instance (kind, name) on db
// and one every cfg.Interval until Stop; health is the component's own
// Health and counts its counters. It returns nil when cfg.Interval is
// negative. Start never fails: a write that fails is logged and tried
// again at the next tick.
func Start(db *gorm.DB, cfg fleet.Config, kind, name string, health func(context.Context) error, counts *Counters, log *slog.Logger) *Beat {
	if cfg.Interval < 0 || db == nil {
		return nil
	}
	host, _ := os.Hostname()
	// The heartbeat reports its own failures (once, and when it recovers):
	// gorm's logger would print a failed write at every tick.
	b := &Beat{db: db.Session(&gorm.Session{Logger: logger.Discard}), cfg: cfg, kind: kind, name: name, health: health, counts: counts,
		id:  fmt.Sprintf("%s-%d-%s", host, os.Getpid(), txmsg.NewID()[24:]),
		log: log.With("instances_table", cfg.Table), done: make(chan struct{})}
	b.ctx, b.stop = context.WithCancel(context.Background())
	go b.run()
	return b
}

func (b *Beat) run() {
	defer close(b.done)
	t := time.NewTicker(b.cfg.Interval)
	defer t.Stop()
	failing := false
	for n := 0; ; n++ {
		err := b.beat(n%expireEvery == 0)
		if b.ctx.Err() != nil {
			return // stopped during the beat
		}
		switch {
		case err != nil && !failing:
			b.log.Warn("cannot write the heartbeat into the instance table; retrying every interval (create the table with Migrate or txmsgctl migrate)", "err", err)
		case err == nil && failing:
			b.log.Info("heartbeat written again")
		}
		failing = err != nil
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat checks the component's health and writes the row; expire also
// deletes the rows of instances gone for longer than Expiry.
func (b *Beat) beat(expire bool) error {
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Interval)
	defer cancel()
	healthy, lastErr := true, ""
	if herr := b.health(ctx); herr != nil {
		if b.ctx.Err() != nil {
			return nil // stopped: the row is deleted, or left as a dead process leaves it
		}
		healthy, lastErr = false, cut(herr.Error())
	}
	counts := b.counts.Snapshot()
	cols := append([]string{"kind", "name", "instance", "started_at", "heartbeat_at", "interval_us", "healthy", "last_error"}, fleet.Columns...)
	args := []any{b.kind, b.name, b.id, b.cfg.Interval.Microseconds(), healthy, lastErr}
	for _, v := range counts.Values() {
		args = append(args, v)
	}
	var set strings.Builder
	set.WriteString("heartbeat_at = VALUES(heartbeat_at), interval_us = VALUES(interval_us), healthy = VALUES(healthy), last_error = VALUES(last_error)")
	for _, c := range fleet.Columns {
		fmt.Fprintf(&set, ", %s = VALUES(%s)", c, c)
	}
	q := fmt.Sprintf("INSERT INTO %s (%s) VALUES (?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?, ?, ?%s) ON DUPLICATE KEY UPDATE %s",
		b.cfg.Table, strings.Join(cols, ", "), strings.Repeat(", ?", len(fleet.Columns)), set.String())
	if err := b.db.WithContext(ctx).Exec(q, args...).Error; err != nil {
		return err
	}
	if !expire {
		return nil
	}
	return b.db.WithContext(ctx).Exec(fmt.Sprintf("DELETE FROM %s WHERE heartbeat_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND", b.cfg.Table),
		b.cfg.Expiry.Microseconds()).Error
}

// Stop stops the heartbeat and deletes the instance's row, within ctx.
func (b *Beat) Stop(ctx context.Context) {
	if b == nil {
		return
	}
	b.stop()
	select {
	case <-b.done:
	case <-ctx.Done():
	}
	err := b.db.WithContext(ctx).Exec(fmt.Sprintf("DELETE FROM %s WHERE kind = ? AND name = ? AND instance = ?", b.cfg.Table), b.kind, b.name, b.id).Error
	if err != nil {
		b.log.Warn("cannot delete this instance's row of the instance table; it turns stale, and is deleted after Heartbeat.Expiry", "err", err)
	}
}

// cut bounds a stored error to maxError bytes, dropping a rune cut in
// two.
func cut(s string) string {
	if len(s) <= maxError {
		return s
	}
	return strings.ToValidUTF8(s[:maxError], "")
}

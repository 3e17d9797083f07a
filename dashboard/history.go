package dashboard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
)

// leaseName is the key of the history's one lease row.
const leaseName = "sampler"

// daySpan and dayBucket are the long chart's span and the width of its
// downsampled points.
const (
	daySpan   = 24 * time.Hour
	dayBucket = 5 * time.Minute
)

// history samples the fleet into the history table, every interval, while
// this dashboard holds the history lease (so that of several dashboards on
// one database only one samples), and reads the table for the charts.
//
// A sample is the sum, over every row of the instance table, of the
// increase of its counters since the previous sample; a row whose
// counters went down (its instance restarted under the same ID) counts
// from zero, and a row that appeared since the previous sample counts
// whole when its instance started after it. The first sample after this
// dashboard takes the lease is a baseline and writes nothing.
type history struct {
	d        *Dashboard
	db       *gorm.DB
	interval time.Duration
	table    string
	name     string

	mu       sync.Mutex
	lastErr  string
	migrated bool
	prev     map[[3]string]fleet.Counts // by kind, name, instance
	prevAt   time.Time                  // the database's clock
}

func newHistory(d *Dashboard) *history {
	host, _ := os.Hostname()
	return &history{d: d, db: store.Quiet(d.db), interval: d.cfg.SampleInterval, table: d.cfg.HistoryTable,
		name: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), txmsg.NewID()[24:])}
}

func (h *history) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		h.take(ctx)
		select {
		case <-ctx.Done():
			h.release()
			return
		case <-t.C:
		}
	}
}

// take samples once, if this dashboard holds the lease.
func (h *history) take(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, h.d.cfg.QueryTimeout)
	defer cancel()
	err := h.sample(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		h.lastErr = err.Error()
	} else if err == nil {
		h.lastErr = ""
	}
}

func (h *history) sample(ctx context.Context) error {
	if !h.migrated {
		if err := fleet.MigrateHistory(ctx, h.d.db, h.table); err != nil {
			return err
		}
		h.migrated = true
	}
	held, err := h.lease(ctx)
	if err != nil || !held {
		h.prev = nil
		return err
	}
	var now time.Time
	if err := h.db.WithContext(ctx).Raw("SELECT UTC_TIMESTAMP(6)").Scan(&now).Error; err != nil {
		return fmt.Errorf("history: database clock: %w", err)
	}
	rows, err := fleet.List(ctx, h.d.db, h.d.cfg.InstancesTable)
	if err != nil && !errors.Is(err, fleet.ErrNoTable) { // no table: no instance counts, the depths still
		return err
	}
	cur := make(map[[3]string]fleet.Counts, len(rows))
	var delta []int64
	for _, r := range rows {
		key := [3]string{r.Kind, r.Name, r.ID}
		cur[key] = r.Counts
		old, seen := h.prev[key]
		if !seen && r.StartedAt.Before(h.prevAt) {
			continue // running before the baseline, unseen: no increase known
		}
		delta = addIncrease(delta, r.Counts.Values(), old.Values())
	}
	prev, prevAt := h.prev, h.prevAt
	h.prev, h.prevAt = cur, now
	if prev == nil {
		return nil // the baseline
	}
	s := fleet.Sample{At: now, Micros: now.Sub(prevAt).Microseconds(), Sampler: h.name, Counts: countsOf(delta)}
	// The depths are optional: a database has one mode's tables.
	if st, err := h.d.ob.Stats(ctx); err == nil {
		s.Pending, s.ParkedRows = st.Pending, st.Parked
		s.Published, _ = h.d.ob.SentSince(ctx, prevAt)
	}
	if c, err := h.d.chk.Counts(ctx); err == nil {
		for _, n := range c {
			s.Barrier += n
		}
	}
	if err := h.db.WithContext(ctx).Table(h.table).Create(&s).Error; err != nil {
		return fmt.Errorf("history: write a sample into %s: %w", h.table, err)
	}
	err = h.db.WithContext(ctx).Exec(fmt.Sprintf("DELETE FROM %s WHERE at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND", h.table),
		h.d.cfg.HistoryRetention.Microseconds()).Error
	if err != nil {
		return fmt.Errorf("history: delete samples past the retention from %s: %w", h.table, err)
	}
	return nil
}

// addIncrease adds to sum, column by column, how much cur grew over old;
// a column that went down counts cur whole (the counter restarted).
func addIncrease(sum, cur, old []int64) []int64 {
	if sum == nil {
		sum = make([]int64, len(cur))
	}
	for i, v := range cur {
		var o int64
		if i < len(old) {
			o = old[i]
		}
		if v >= o {
			sum[i] += v - o
		} else {
			sum[i] += v
		}
	}
	return sum
}

// countsOf is the inverse of fleet.Counts.Values.
func countsOf(v []int64) fleet.Counts {
	if len(v) < len(fleet.Columns) {
		return fleet.Counts{}
	}
	return fleet.Counts{Sent: v[0], Handled: v[1], Duplicates: v[2], Parked: v[3], Failed: v[4], Swept: v[5],
		CheckBackCommit: v[6], CheckBackRollback: v[7], CheckBackUnknown: v[8]}
}

// lease takes or renews the history lease for three intervals, by the
// database's clock, and reports whether this dashboard holds it.
func (h *history) lease(ctx context.Context) (bool, error) {
	lt := h.table + fleet.HistoryLeaseSuffix
	db := h.db.WithContext(ctx)
	if err := db.Exec(fmt.Sprintf("INSERT IGNORE INTO %s (name, owner, expires_at) VALUES (?, '', '1970-01-01 00:00:01')", lt), leaseName).Error; err != nil {
		return false, fmt.Errorf("history: lease %s: %w", lt, err)
	}
	res := db.Exec(fmt.Sprintf("UPDATE %s SET owner = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE name = ? AND (owner = ? OR expires_at < UTC_TIMESTAMP(6))", lt),
		h.name, (3 * h.interval).Microseconds(), leaseName, h.name)
	if res.Error != nil {
		return false, fmt.Errorf("history: lease %s: %w", lt, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// release gives the lease up, so that another dashboard samples at once.
func (h *history) release() {
	ctx, cancel := context.WithTimeout(context.Background(), h.d.cfg.QueryTimeout)
	defer cancel()
	_ = h.db.WithContext(ctx).Exec(fmt.Sprintf("UPDATE %s SET expires_at = '1970-01-01 00:00:01' WHERE name = ? AND owner = ?",
		h.table+fleet.HistoryLeaseSuffix), leaseName, h.name).Error
}

// point is one point of a chart: the samples of one bucket summed.
type point struct {
	At      time.Time
	Seconds float64
	fleet.Counts
	Published, Pending, ParkedRows, Barrier int64
}

// read returns the samples of the last span, summed into buckets of
// bucket (zero: one point per sample), and the database's clock.
func (h *history) read(ctx context.Context, span, bucket time.Duration) ([]point, time.Time, error) {
	var now time.Time
	if err := h.db.WithContext(ctx).Raw("SELECT UTC_TIMESTAMP(6)").Scan(&now).Error; err != nil {
		return nil, now, fmt.Errorf("history: database clock: %w", err)
	}
	group := "at"
	if bucket > 0 {
		group = fmt.Sprintf("TIMESTAMPDIFF(SECOND, '2000-01-01', at) DIV %d", int64(bucket.Seconds()))
	}
	sel := "MAX(at) AS at, SUM(span_us) AS span_us, SUM(published) AS published, MAX(pending) AS pending, MAX(parked_rows) AS parked_rows, MAX(barrier) AS barrier"
	for _, c := range fleet.Columns {
		sel += fmt.Sprintf(", SUM(%s) AS %s", c, c)
	}
	var rows []fleet.Sample
	err := h.db.WithContext(ctx).Table(h.table).Select(sel).
		Where("at >= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND", span.Microseconds()).
		Group(group).Order("at").Scan(&rows).Error
	if err != nil {
		return nil, now, fmt.Errorf("history: read %s: %w", h.table, err)
	}
	out := make([]point, len(rows))
	for i, r := range rows {
		out[i] = point{At: r.At, Seconds: float64(r.Micros) / 1e6, Counts: r.Counts,
			Published: r.Published, Pending: r.Pending, ParkedRows: r.ParkedRows, Barrier: r.Barrier}
	}
	return out, now, nil
}

// charts are the overview's two charts: the last hour, one point per
// sample, and the last day in five-minute points.
func (h *history) charts(ctx context.Context) []chartView {
	h.mu.Lock()
	lastErr := h.lastErr
	h.mu.Unlock()
	var out []chartView
	for _, c := range []struct {
		id, title    string
		span, bucket time.Duration
		least        time.Duration // the shortest span drawn
	}{{"chart-hour", "Last hour", chartSpan, 0, time.Minute}, {"chart-day", "Last day", daySpan, dayBucket, time.Hour}} {
		pts, now, err := h.read(ctx, c.span, c.bucket)
		// A history younger than the span is drawn over its own age.
		span, title := c.span, c.title
		if len(pts) > 0 && now.Sub(pts[0].At) < c.span {
			span = min(c.span, max(now.Sub(pts[0].At), c.least))
			if span < c.span {
				title = "Last " + roundDur(span)
			}
		}
		cv := drawChart(c.id, title, pts, now, span)
		cv.Interval = h.interval
		if c.bucket > 0 {
			cv.Bucket = c.bucket
		}
		cv.Err = lastErr
		if err != nil {
			cv.Err = err.Error()
		}
		out = append(out, cv)
	}
	return out
}

package txprom

import (
	"context"
	"fmt"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
)

// OutboxStats is a snapshot of an outbox table. It has the shape of the
// outbox adapter's Stats, so this module needs no import of it: pass the
// method value (*outbox.Outbox).Stats to [NewOutboxCollector] as it is.
type OutboxStats struct {
	// Pending, Sent and Parked count the rows in each status.
	Pending, Sent, Parked int64
	// OldestPending is the age of the oldest pending row; zero when none.
	OldestPending time.Duration
	// Waiting counts the pending rows whose last publish failed because
	// the broker or the route was unavailable.
	Waiting int64
}

// OutboxConfig configures [NewOutboxCollector].
type OutboxConfig struct {
	// Table is the table label's value. Default "txmsg_outbox".
	Table string
	// Timeout bounds the stats query of one scrape. Default 5 s.
	Timeout time.Duration
	// ConstLabels are added to every metric. Optional.
	ConstLabels prom.Labels
	// Metrics, when set, adds its Config.ConstLabels to ConstLabels (a
	// label set in both takes the value here), so that the collector's
	// series carry the same constant labels as the hooks'. Optional.
	Metrics *Metrics
}

// OutboxCollector is a prometheus.Collector that reads an outbox table's
// depth at scrape time: txmsg_outbox_rows{table,status},
// txmsg_outbox_oldest_pending_age_seconds{table},
// txmsg_outbox_waiting_rows{table} and txmsg_outbox_stats_up{table}. When the query fails or times out, the
// scrape carries only txmsg_outbox_stats_up = 0.
type OutboxCollector struct {
	stats   func(context.Context) (OutboxStats, error)
	timeout time.Duration
	table   string
	rows    *prom.Desc
	oldest  *prom.Desc
	waiting *prom.Desc
	up      *prom.Desc
}

var _ prom.Collector = (*OutboxCollector)(nil)

// NewOutboxCollector returns a collector that calls stats once per scrape,
// bounded by cfg.Timeout. stats is usually (*outbox.Outbox).Stats: its
// result type converts to [OutboxStats], and S is inferred.
//
// Stats scans the table's index on every call; keep the scrape interval
// in seconds, not milliseconds, for tables holding many sent rows.
func NewOutboxCollector[S ~struct {
	Pending, Sent, Parked int64
	OldestPending         time.Duration
	Waiting               int64
}](stats func(context.Context) (S, error), cfg OutboxConfig) (*OutboxCollector, error) {
	if stats == nil {
		return nil, fmt.Errorf("prometheus: outbox collector: stats is nil")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("prometheus: outbox collector: Timeout must not be negative")
	}
	if cfg.Table == "" {
		cfg.Table = "txmsg_outbox"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Metrics != nil && len(cfg.Metrics.constLabels) > 0 {
		merged := copyLabels(cfg.Metrics.constLabels)
		for k, v := range cfg.ConstLabels {
			merged[k] = v
		}
		cfg.ConstLabels = merged
	}
	return &OutboxCollector{
		stats: func(ctx context.Context) (OutboxStats, error) {
			s, err := stats(ctx)
			return OutboxStats(s), err
		},
		timeout: cfg.Timeout,
		table:   cfg.Table,
		rows: prom.NewDesc("txmsg_outbox_rows", "Outbox rows by status (pending, sent, parked).",
			[]string{"table", "status"}, cfg.ConstLabels),
		oldest: prom.NewDesc("txmsg_outbox_oldest_pending_age_seconds", "Age of the oldest pending outbox row in seconds; 0 when none is pending.",
			[]string{"table"}, cfg.ConstLabels),
		waiting: prom.NewDesc("txmsg_outbox_waiting_rows", "Pending outbox rows whose last publish failed because the broker or the route was unavailable.",
			[]string{"table"}, cfg.ConstLabels),
		up: prom.NewDesc("txmsg_outbox_stats_up", "1 when this scrape's outbox stats query succeeded, else 0.",
			[]string{"table"}, cfg.ConstLabels),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *OutboxCollector) Describe(ch chan<- *prom.Desc) {
	ch <- c.rows
	ch <- c.oldest
	ch <- c.waiting
	ch <- c.up
}

// Collect implements prometheus.Collector: it queries the table now.
func (c *OutboxCollector) Collect(ch chan<- prom.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.stats(ctx)
	if err != nil {
		ch <- prom.MustNewConstMetric(c.up, prom.GaugeValue, 0, c.table)
		return
	}
	ch <- prom.MustNewConstMetric(c.up, prom.GaugeValue, 1, c.table)
	ch <- prom.MustNewConstMetric(c.rows, prom.GaugeValue, float64(s.Pending), c.table, "pending")
	ch <- prom.MustNewConstMetric(c.rows, prom.GaugeValue, float64(s.Sent), c.table, "sent")
	ch <- prom.MustNewConstMetric(c.rows, prom.GaugeValue, float64(s.Parked), c.table, "parked")
	ch <- prom.MustNewConstMetric(c.oldest, prom.GaugeValue, s.OldestPending.Seconds(), c.table)
	ch <- prom.MustNewConstMetric(c.waiting, prom.GaugeValue, float64(s.Waiting), c.table)
}

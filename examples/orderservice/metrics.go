package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/txmsg"
)

// Metrics counts txmsg's events through its hooks and writes them for GET
// /metrics in Prometheus's text format, under the names of
// adapters/txprom.
//
// The service keeps this small exposition of its own instead of using
// adapters/txprom: that adapter is a Go module of its own, and
// requiring it here would put the Prometheus client into txmsg's root
// module, which this example belongs to. A service outside this
// repository would register adapters/txprom's Metrics and
// OutboxCollector instead, and get histograms as well.
type Metrics struct {
	mu     sync.Mutex
	series map[string]map[string]float64 // family → label set → value
}

// metricFamilies are the counters Metrics writes, in order, with their
// help text.
var metricFamilies = []struct{ name, help string }{
	{"txmsg_half_sends_total", "Half messages sent to the broker, by topic and result (ok, error)."},
	{"txmsg_local_transactions_total", "Local transactions ended, by topic and result (committed, rolled_back, unknown)."},
	{"txmsg_checkbacks_total", "Broker check-backs answered, by producer group, topic and result (committed, rolled_back, unknown)."},
	{"txmsg_relay_batches_total", "Batches an outbox relay published, by relay and table."},
	{"txmsg_relay_messages_total", "Messages an outbox relay tried to publish, by relay, table and result (ok, error)."},
	{"txmsg_consumer_messages_total", "Messages a consumer decided about, by group, topic and result (handled, duplicate, parked, error)."},
	{"txmsg_reconcile_passes_total", "Passes of a reconciler over a window of committed events, by reconciler and result (ok, error)."},
	{"txmsg_reconcile_events_total", "Committed events a reconciler looked up on the brokers, by reconciler and result (checked, missing, republished)."},
}

var (
	_ txmsg.HookHalfSent   = (*Metrics)(nil)
	_ txmsg.HookLocalDone  = (*Metrics)(nil)
	_ txmsg.HookCheckBack  = (*Metrics)(nil)
	_ txmsg.HookRelayBatch = (*Metrics)(nil)
	_ txmsg.HookConsumed   = (*Metrics)(nil)
	_ txmsg.HookReconciled = (*Metrics)(nil)
)

// NewMetrics returns empty Metrics.
func NewMetrics() *Metrics {
	return &Metrics{series: map[string]map[string]float64{}}
}

// Hooks returns the hooks to put in the components' configs.
func (m *Metrics) Hooks() txmsg.Hooks { return txmsg.Hooks{m} }

// add adds v to the series name{labels}, labels being name/value pairs.
func (m *Metrics) add(name string, v float64, labels ...string) {
	set := labelSet(labels)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.series[name] == nil {
		m.series[name] = map[string]float64{}
	}
	m.series[name][set] += v
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// labelSet renders name/value pairs as the text format's label set.
func labelSet(labels []string) string {
	var b strings.Builder
	for i := 0; i+1 < len(labels); i += 2 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `%s="%s"`, labels[i], labelEscaper.Replace(labels[i+1]))
	}
	return b.String()
}

// OnHalfSent implements txmsg.HookHalfSent.
func (m *Metrics) OnHalfSent(_ context.Context, msg *txmsg.Message, err error, _ time.Duration) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.add("txmsg_half_sends_total", 1, "topic", msg.Topic, "result", result)
}

// OnLocalDone implements txmsg.HookLocalDone.
func (m *Metrics) OnLocalDone(_ context.Context, msg *txmsg.Message, state txmsg.LocalState, _ error, _ time.Duration) {
	m.add("txmsg_local_transactions_total", 1, "topic", msg.Topic, "result", state.String())
}

// OnCheckBack implements txmsg.HookCheckBack.
func (m *Metrics) OnCheckBack(group, _, topic string, state txmsg.LocalState, _ error, _ time.Duration) {
	m.add("txmsg_checkbacks_total", 1, "group", group, "topic", topic, "result", state.String())
}

// OnRelayBatch implements txmsg.HookRelayBatch.
func (m *Metrics) OnRelayBatch(_ context.Context, relay, table string, size, failed int, _ time.Duration) {
	m.add("txmsg_relay_batches_total", 1, "relay", relay, "table", table)
	m.add("txmsg_relay_messages_total", float64(size-failed), "relay", relay, "table", table, "result", "ok")
	m.add("txmsg_relay_messages_total", float64(failed), "relay", relay, "table", table, "result", "error")
}

// OnConsumed implements txmsg.HookConsumed.
func (m *Metrics) OnConsumed(_ context.Context, group string, r *txmsg.Received, outcome txmsg.Outcome, err error, _ time.Duration) {
	o := outcome.String()
	if err != nil || o == "failed" {
		o = "error"
	}
	m.add("txmsg_consumer_messages_total", 1, "group", group, "topic", r.Message.Topic, "result", o)
}

// OnReconciled implements txmsg.HookReconciled.
func (m *Metrics) OnReconciled(_ context.Context, reconciler string, checked, missing, republished int, err error, _ time.Duration) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.add("txmsg_reconcile_passes_total", 1, "reconciler", reconciler, "result", result)
	m.add("txmsg_reconcile_events_total", float64(checked), "reconciler", reconciler, "result", "checked")
	m.add("txmsg_reconcile_events_total", float64(missing), "reconciler", reconciler, "result", "missing")
	m.add("txmsg_reconcile_events_total", float64(republished), "reconciler", reconciler, "result", "republished")
}

// outboxGauges reads the outbox's depth now, as adapters/txprom's
// OutboxCollector would; nothing in transactional mode (ob nil).
func outboxGauges(ctx context.Context, ob *outbox.Outbox) ([]gauge, error) {
	if ob == nil {
		return nil, nil
	}
	s, err := ob.Stats(ctx)
	if err != nil {
		return nil, err
	}
	t := ob.Table()
	const rowsHelp = "Outbox rows by status (pending, sent, parked)."
	return []gauge{
		{name: "txmsg_outbox_rows", help: rowsHelp, labels: []string{"table", t, "status", "pending"}, value: float64(s.Pending)},
		{name: "txmsg_outbox_rows", help: rowsHelp, labels: []string{"table", t, "status", "sent"}, value: float64(s.Sent)},
		{name: "txmsg_outbox_rows", help: rowsHelp, labels: []string{"table", t, "status", "parked"}, value: float64(s.Parked)},
		{name: "txmsg_outbox_oldest_pending_age_seconds", help: "Age of the oldest pending outbox row in seconds; 0 when none is pending.",
			labels: []string{"table", t}, value: s.OldestPending.Seconds()},
	}, nil
}

// gauge is one gauge sample written next to the counters.
type gauge struct {
	name, help string
	labels     []string
	value      float64
}

// WriteTo writes every counter that has a series, then gauges, in
// Prometheus's text exposition format 0.0.4.
func (m *Metrics) WriteTo(w io.Writer, gauges []gauge) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range metricFamilies {
		series := m.series[f.name]
		if len(series) == 0 {
			continue
		}
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", f.name, f.help, f.name)
		keys := make([]string, 0, len(series))
		for k := range series {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s{%s} %g\n", f.name, k, series[k])
		}
	}
	seen := map[string]bool{}
	for _, g := range gauges {
		if !seen[g.name] {
			seen[g.name] = true
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", g.name, g.help, g.name)
		}
		fmt.Fprintf(w, "%s{%s} %g\n", g.name, labelSet(g.labels), g.value)
	}
}

package txprom

import (
	"context"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/txmsg/txmsg/txmsg"
)

// Config configures [New]. The zero value is usable.
type Config struct {
	// ConstLabels are added to every metric, for example a service name.
	// Optional.
	ConstLabels prom.Labels
	// Buckets are the latency histograms' buckets, in seconds. Default
	// prometheus.DefBuckets (5 ms to 10 s).
	Buckets []float64
	// BatchSizeBuckets are txmsg_relay_batch_size's buckets. Default 1,
	// 2, 5, 10, 20, 50, 100, 200, 500, 1000.
	BatchSizeBuckets []float64
}

// Metrics counts txmsg's events. It implements the hooks of both modes
// and of consumers, and prometheus.Collector: register it once, and pass
// it in the Hooks of every component whose events it should count. It is
// safe for concurrent use.
type Metrics struct {
	halfSends        *prom.CounterVec
	halfSendSeconds  *prom.HistogramVec
	localTx          *prom.CounterVec
	localTxSeconds   *prom.HistogramVec
	checkBacks       *prom.CounterVec
	checkBackSeconds prom.Histogram
	relayBatches     prom.Counter
	relayMessages    *prom.CounterVec
	relayBatchSize   prom.Histogram
	relayPublish     prom.Histogram
	relayUnavailable prom.Counter
	relayBrokerDown  prom.Gauge
	consumed         *prom.CounterVec
	consumeSeconds   *prom.HistogramVec
}

var (
	_ txmsg.HookHalfSent         = (*Metrics)(nil)
	_ txmsg.HookLocalDone        = (*Metrics)(nil)
	_ txmsg.HookCheckBack        = (*Metrics)(nil)
	_ txmsg.HookRelayBatch       = (*Metrics)(nil)
	_ txmsg.HookRelayUnavailable = (*Metrics)(nil)
	_ txmsg.HookConsumed         = (*Metrics)(nil)
	_ prom.Collector             = (*Metrics)(nil)
)

// New returns Metrics with every series described in the package
// documentation. Register it with a registry before scraping.
func New(cfg Config) *Metrics {
	if cfg.Buckets == nil {
		cfg.Buckets = prom.DefBuckets
	}
	if cfg.BatchSizeBuckets == nil {
		cfg.BatchSizeBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
	}
	counter := func(name, help string, labels ...string) *prom.CounterVec {
		return prom.NewCounterVec(prom.CounterOpts{Namespace: "txmsg", Name: name, Help: help, ConstLabels: cfg.ConstLabels}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prom.HistogramVec {
		return prom.NewHistogramVec(prom.HistogramOpts{Namespace: "txmsg", Name: name, Help: help, ConstLabels: cfg.ConstLabels, Buckets: buckets}, labels)
	}
	opts := func(name, help string) prom.Opts {
		return prom.Opts{Namespace: "txmsg", Name: name, Help: help, ConstLabels: cfg.ConstLabels}
	}
	single := func(name, help string, buckets []float64) prom.Histogram {
		o := opts(name, help)
		return prom.NewHistogram(prom.HistogramOpts{Namespace: o.Namespace, Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: buckets})
	}
	return &Metrics{
		halfSends:        counter("half_sends_total", "Half messages sent to the broker, by topic and result (ok, error).", "topic", "result"),
		halfSendSeconds:  histogram("half_send_seconds", "Half-send round trip in seconds.", cfg.Buckets, "topic"),
		localTx:          counter("local_transactions_total", "Local transactions ended, by topic and state (committed, rolled_back, unknown).", "topic", "state"),
		localTxSeconds:   histogram("local_transaction_seconds", "Local transaction time in seconds.", cfg.Buckets, "topic"),
		checkBacks:       counter("checkbacks_total", "Broker check-backs answered, by answer (commit, rollback, unknown).", "answer"),
		checkBackSeconds: single("checkback_seconds", "Time to answer one check-back, in seconds.", cfg.Buckets),
		relayBatches:     prom.NewCounter(prom.CounterOpts(opts("relay_batches_total", "Batches the outbox relay published."))),
		relayMessages:    counter("relay_messages_total", "Messages the outbox relay tried to publish, by result (published, failed).", "result"),
		relayBatchSize:   single("relay_batch_size", "Messages per relay batch.", cfg.BatchSizeBuckets),
		relayPublish:     single("relay_publish_seconds", "Time to publish one relay batch, in seconds.", cfg.Buckets),
		relayUnavailable: prom.NewCounter(prom.CounterOpts(opts("relay_unavailable_total",
			"Relayed messages whose publish failed because the broker or the route was unavailable; they wait and count no attempt."))),
		relayBrokerDown: prom.NewGauge(prom.GaugeOpts(opts("relay_broker_unavailable",
			"1 when the last relay publish failed because the broker or the route was unavailable, 0 once a relay publish went through."))),
		consumed:       counter("consumer_messages_total", "Messages a consumer decided about, by group, topic and outcome (handled, duplicate, parked, failed).", "group", "topic", "outcome"),
		consumeSeconds: histogram("consumer_handle_seconds", "Time to decode, dedupe and handle one message and commit, in seconds.", cfg.Buckets, "group", "topic"),
	}
}

func (m *Metrics) collectors() []prom.Collector {
	return []prom.Collector{
		m.halfSends, m.halfSendSeconds, m.localTx, m.localTxSeconds, m.checkBacks, m.checkBackSeconds,
		m.relayBatches, m.relayMessages, m.relayBatchSize, m.relayPublish, m.relayUnavailable, m.relayBrokerDown,
		m.consumed, m.consumeSeconds,
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prom.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prom.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// OnHalfSent implements txmsg.HookHalfSent.
func (m *Metrics) OnHalfSent(_ context.Context, msg *txmsg.Message, err error, took time.Duration) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.halfSends.WithLabelValues(msg.Topic, result).Inc()
	m.halfSendSeconds.WithLabelValues(msg.Topic).Observe(took.Seconds())
}

// OnLocalDone implements txmsg.HookLocalDone.
func (m *Metrics) OnLocalDone(_ context.Context, msg *txmsg.Message, state txmsg.LocalState, _ error, took time.Duration) {
	m.localTx.WithLabelValues(msg.Topic, state.String()).Inc()
	m.localTxSeconds.WithLabelValues(msg.Topic).Observe(took.Seconds())
}

// OnCheckBack implements txmsg.HookCheckBack.
func (m *Metrics) OnCheckBack(_, _ string, state txmsg.LocalState, _ error, took time.Duration) {
	m.checkBacks.WithLabelValues(answer(state)).Inc()
	m.checkBackSeconds.Observe(took.Seconds())
}

func answer(s txmsg.LocalState) string {
	switch s {
	case txmsg.StateCommitted:
		return "commit"
	case txmsg.StateRolledBack:
		return "rollback"
	default:
		return "unknown"
	}
}

// OnRelayBatch implements txmsg.HookRelayBatch.
func (m *Metrics) OnRelayBatch(_ context.Context, size, failed int, took time.Duration) {
	m.relayBatches.Inc()
	m.relayMessages.WithLabelValues("published").Add(float64(size - failed))
	m.relayMessages.WithLabelValues("failed").Add(float64(failed))
	m.relayBatchSize.Observe(float64(size))
	m.relayPublish.Observe(took.Seconds())
	if failed < size {
		m.relayBrokerDown.Set(0)
	}
}

// OnRelayUnavailable implements txmsg.HookRelayUnavailable.
func (m *Metrics) OnRelayUnavailable(_ context.Context, rows int, _ error) {
	m.relayUnavailable.Add(float64(rows))
	m.relayBrokerDown.Set(1)
}

// OnConsumed implements txmsg.HookConsumed.
func (m *Metrics) OnConsumed(_ context.Context, group string, r *txmsg.Received, outcome txmsg.Outcome, err error, took time.Duration) {
	o := outcome.String()
	if err != nil {
		o = "failed"
	}
	topic := ""
	if r != nil && r.Message != nil {
		topic = r.Message.Topic
	}
	m.consumed.WithLabelValues(group, topic, o).Inc()
	m.consumeSeconds.WithLabelValues(group, topic).Observe(took.Seconds())
}

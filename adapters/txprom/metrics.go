package txprom

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/txmsg/txmsg/txmsg"
)

// The values of the result label. Every counter with a result label uses
// these words and no others:
//
//   - ok, error: an attempt that went through or failed (half sends,
//     relayed messages);
//   - committed, rolled_back, unknown: a transaction's outcome (local
//     transactions, check-back answers);
//   - handled, duplicate, parked, error: a consumer's decision about a
//     message (error: it will be delivered again);
//   - hit, miss: a check-back cache lookup;
//   - checked, missing, republished: what a reconciler did with the
//     committed events of a window (ok, error: its passes).
const (
	ResultOK         = "ok"
	ResultError      = "error"
	ResultCommitted  = "committed"
	ResultRolledBack = "rolled_back"
	ResultUnknown    = "unknown"
	ResultHandled    = "handled"
	ResultDuplicate  = "duplicate"
	ResultParked     = "parked"
	ResultHit        = "hit"
	ResultMiss       = "miss"
	// ResultChecked, ResultMissing and ResultRepublished count a
	// reconciler's events: looked up on the brokers, found on none,
	// published again.
	ResultChecked     = "checked"
	ResultMissing     = "missing"
	ResultRepublished = "republished"
)

var (
	attemptResults   = []string{ResultOK, ResultError}
	outcomeResults   = []string{ResultCommitted, ResultRolledBack, ResultUnknown}
	consumerResults  = []string{ResultHandled, ResultDuplicate, ResultParked, ResultError}
	reconcileResults = []string{ResultChecked, ResultMissing, ResultRepublished}
)

// Config configures [New]. The zero value is usable.
type Config struct {
	// ConstLabels are added to every metric, for example a service name,
	// including those of the collectors made with this Metrics
	// ([OutboxConfig.Metrics], [WatchCheckBackCache]). Optional.
	ConstLabels prom.Labels
	// Buckets are the latency histograms' buckets, in seconds. Default
	// prometheus.DefBuckets (5 ms to 10 s).
	Buckets []float64
	// BatchSizeBuckets are txmsg_relay_batch_size's buckets. Default 1,
	// 2, 5, 10, 20, 50, 100, 200, 500, 1000.
	BatchSizeBuckets []float64
}

// WithDefaults returns c with its zero fields set to their defaults:
// Buckets prometheus.DefBuckets, BatchSizeBuckets 1 to 1000. It checks
// nothing; see [Config.Validate].
func (c Config) WithDefaults() Config {
	if c.Buckets == nil {
		c.Buckets = prom.DefBuckets
	}
	if c.BatchSizeBuckets == nil {
		c.BatchSizeBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
	}
	return c
}

// Validate checks a config that went through [Config.WithDefaults]: the
// ConstLabels' names are valid Prometheus label names and no metric's
// own label, and the buckets increase. Its errors wrap
// txmsg.ErrInvalidConfig and name the field. [New] does not call it: a
// config it would refuse makes the registration fail instead, with
// Prometheus's error.
func (c Config) Validate() error {
	own := map[string]bool{"group": true, "topic": true, "relay": true, "table": true, "result": true, "status": true}
	for name := range c.ConstLabels {
		if !labelName.MatchString(name) || strings.HasPrefix(name, "__") {
			return fmt.Errorf("%w: txprom: ConstLabels: %q is not a Prometheus label name", txmsg.ErrInvalidConfig, name)
		}
		if own[name] {
			return fmt.Errorf("%w: txprom: ConstLabels: %q is a label of txmsg's metrics", txmsg.ErrInvalidConfig, name)
		}
	}
	for _, b := range []struct {
		field string
		v     []float64
	}{{"Buckets", c.Buckets}, {"BatchSizeBuckets", c.BatchSizeBuckets}} {
		if len(b.v) == 0 {
			return fmt.Errorf("%w: txprom: %s is empty", txmsg.ErrInvalidConfig, b.field)
		}
		for i := 1; i < len(b.v); i++ {
			if b.v[i] <= b.v[i-1] {
				return fmt.Errorf("%w: txprom: %s must increase: %v", txmsg.ErrInvalidConfig, b.field, b.v)
			}
		}
	}
	return nil
}

// labelName matches a Prometheus label name.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Metrics counts txmsg's events. It implements the hooks of both modes,
// of relays, sweepers and consumers, and prometheus.Collector: register it
// once, and pass it in the Hooks of every component whose events it
// should count. It is safe for concurrent use.
//
// A series exists once its label values are known: when an event carries
// them, or earlier, at zero, when the component is declared with
// [Metrics.AddTransactional], [Metrics.AddOutbox], [Metrics.AddRelay],
// [Metrics.AddSweeper], [Metrics.AddReconciler] or [Metrics.AddConsumer]. Declare every component
// the process runs, so that an alert on a rate or an increase sees 0
// instead of no data before the first event. A process declares and runs
// no relay exports no relay series.
type Metrics struct {
	constLabels prom.Labels

	halfSends        *prom.CounterVec
	halfSendSeconds  *prom.HistogramVec
	localTx          *prom.CounterVec
	localTxSeconds   *prom.HistogramVec
	invalidSends     *prom.CounterVec
	checkBacks       *prom.CounterVec
	checkBackSeconds *prom.HistogramVec
	held             *prom.CounterVec
	relayBatches     *prom.CounterVec
	relayMessages    *prom.CounterVec
	relayBatchSize   *prom.HistogramVec
	relayPublish     *prom.HistogramVec
	relayUnavailable *prom.CounterVec
	relayBrokerDown  *prom.GaugeVec
	consumed         *prom.CounterVec
	consumeSeconds   *prom.HistogramVec
	lateness         *prom.HistogramVec
	reconcilePasses  *prom.CounterVec
	reconcileEvents  *prom.CounterVec

	cacheLookups   *prom.Desc
	cacheEvictions *prom.Desc
	cacheEntries   *prom.Desc
	mu             sync.Mutex
	caches         []watchedCache
}

var (
	_ txmsg.HookHalfSent         = (*Metrics)(nil)
	_ txmsg.HookLocalDone        = (*Metrics)(nil)
	_ txmsg.HookInvalidSend      = (*Metrics)(nil)
	_ txmsg.HookCheckBack        = (*Metrics)(nil)
	_ txmsg.HookHeld             = (*Metrics)(nil)
	_ txmsg.HookRelayBatch       = (*Metrics)(nil)
	_ txmsg.HookRelayUnavailable = (*Metrics)(nil)
	_ txmsg.HookConsumed         = (*Metrics)(nil)
	_ txmsg.HookReconciled       = (*Metrics)(nil)
	_ prom.Collector             = (*Metrics)(nil)
)

// New returns Metrics with every metric described in the package
// documentation. Register it with a registry before scraping, and declare
// the process's components (see [Metrics]).
func New(cfg Config) *Metrics {
	cfg = cfg.WithDefaults()
	counter := func(name, help string, labels ...string) *prom.CounterVec {
		return prom.NewCounterVec(prom.CounterOpts{Namespace: "txmsg", Name: name, Help: help, ConstLabels: cfg.ConstLabels}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prom.HistogramVec {
		return prom.NewHistogramVec(prom.HistogramOpts{Namespace: "txmsg", Name: name, Help: help, ConstLabels: cfg.ConstLabels, Buckets: buckets}, labels)
	}
	return &Metrics{
		constLabels:     copyLabels(cfg.ConstLabels),
		halfSends:       counter("half_sends_total", "Half messages sent to the broker, by topic and result (ok, error).", "topic", "result"),
		halfSendSeconds: histogram("half_send_seconds", "Half-send round trip in seconds.", cfg.Buckets, "topic"),
		localTx: counter("local_transactions_total",
			"Local transactions ended, by topic and result (committed, rolled_back, unknown).", "topic", "result"),
		localTxSeconds: histogram("local_transaction_seconds", "Local transaction time in seconds.", cfg.Buckets, "topic"),
		invalidSends: counter("invalid_sends_total",
			"Messages Transact refused before any write (txmsg.ErrInvalidMessage), by topic.", "topic"),
		checkBacks: counter("checkbacks_total",
			"Broker check-backs answered, by producer group, topic and result (committed, rolled_back, unknown).", "group", "topic", "result"),
		checkBackSeconds: histogram("checkback_seconds", "Time to answer one check-back, in seconds.", cfg.Buckets, "group", "topic"),
		held: counter("sweeper_held_total",
			"Half messages the sweeper held (kept, not decided) because their outcome cannot be known, by sweeper group and topic.", "group", "topic"),
		relayBatches:   counter("relay_batches_total", "Batches an outbox relay published, by relay and table.", "relay", "table"),
		relayMessages:  counter("relay_messages_total", "Messages an outbox relay tried to publish, by relay, table and result (ok, error).", "relay", "table", "result"),
		relayBatchSize: histogram("relay_batch_size", "Messages per relay batch.", cfg.BatchSizeBuckets, "relay", "table"),
		relayPublish:   histogram("relay_publish_seconds", "Time to publish one relay batch, in seconds.", cfg.Buckets, "relay", "table"),
		relayUnavailable: counter("relay_unavailable_total",
			"Relayed messages whose publish failed because the broker or the route was unavailable; they wait and count no attempt.", "relay", "table"),
		relayBrokerDown: prom.NewGaugeVec(prom.GaugeOpts{Namespace: "txmsg", Name: "relay_broker_unavailable", ConstLabels: cfg.ConstLabels,
			Help: "1 when the relay's last publish failed because the broker or the route was unavailable, 0 once a publish went through."},
			[]string{"relay", "table"}),
		consumed: counter("consumer_messages_total",
			"Messages a consumer decided about, by group, topic and result (handled, duplicate, parked, error).", "group", "topic", "result"),
		consumeSeconds: histogram("consumer_handle_seconds", "Time to decode, dedupe and handle one message and commit, in seconds.", cfg.Buckets, "group", "topic"),
		lateness: histogram("consumer_lateness_seconds",
			"How long after its due time a delayed message (txmsg.WithDelay) reached the consumer, in seconds, for the messages handled.",
			latenessBuckets, "group", "topic"),
		reconcilePasses: counter("reconcile_passes_total",
			"Passes of a reconciler over a window of committed events, by reconciler and result (ok, error).", "reconciler", "result"),
		reconcileEvents: counter("reconcile_events_total",
			"Committed events a reconciler looked up on the brokers, by reconciler and result (checked, missing, republished).", "reconciler", "result"),
		cacheLookups: prom.NewDesc("txmsg_checkback_cache_lookups_total",
			"Check-backs looked up in the transactional producer's outcome cache, by producer group and result (hit, miss).",
			[]string{"group", "result"}, cfg.ConstLabels),
		cacheEvictions: prom.NewDesc("txmsg_checkback_cache_evictions_total",
			"Outcomes the check-back cache dropped for size or age, by producer group.", []string{"group"}, cfg.ConstLabels),
		cacheEntries: prom.NewDesc("txmsg_checkback_cache_entries",
			"Outcomes the check-back cache holds, by producer group.", []string{"group"}, cfg.ConstLabels),
	}
}

func copyLabels(l prom.Labels) prom.Labels {
	if l == nil {
		return nil
	}
	out := make(prom.Labels, len(l))
	for k, v := range l {
		out[k] = v
	}
	return out
}

// AddTransactional creates, at zero, the series of a transactional
// producer (txrmq.Transactional) of producer group group that sends to
// topics: half sends, local transactions, invalid sends and check-backs.
func (m *Metrics) AddTransactional(group string, topics ...string) {
	for _, topic := range topics {
		for _, r := range attemptResults {
			m.halfSends.WithLabelValues(topic, r)
		}
		m.halfSendSeconds.WithLabelValues(topic)
		m.addLocal(topic)
		for _, r := range outcomeResults {
			m.checkBacks.WithLabelValues(group, topic, r)
		}
		m.checkBackSeconds.WithLabelValues(group, topic)
	}
}

// AddOutbox creates, at zero, the series of a local-table producer
// (outbox.Outbox) that sends to topics: local transactions and invalid
// sends. Its relays are declared with [Metrics.AddRelay].
func (m *Metrics) AddOutbox(topics ...string) {
	for _, topic := range topics {
		m.addLocal(topic)
	}
}

func (m *Metrics) addLocal(topic string) {
	for _, r := range outcomeResults {
		m.localTx.WithLabelValues(topic, r)
	}
	m.localTxSeconds.WithLabelValues(topic)
	m.invalidSends.WithLabelValues(topic)
}

// AddRelay creates, at zero, the series of the outbox relay named relay
// (Relay.Name) that reads table (Outbox.Table).
func (m *Metrics) AddRelay(relay, table string) {
	m.relayBatches.WithLabelValues(relay, table)
	for _, r := range attemptResults {
		m.relayMessages.WithLabelValues(relay, table, r)
	}
	m.relayBatchSize.WithLabelValues(relay, table)
	m.relayPublish.WithLabelValues(relay, table)
	m.relayUnavailable.WithLabelValues(relay, table)
	m.relayBrokerDown.WithLabelValues(relay, table)
}

// AddSweeper creates, at zero, the series of a sweeper (txrmq.Sweeper) of
// consumer group group for the topics of the half messages it may hold.
func (m *Metrics) AddSweeper(group string, topics ...string) {
	for _, topic := range topics {
		m.held.WithLabelValues(group, topic)
	}
}

// AddReconciler creates, at zero, the series of a reconciler
// (txrmq.Reconciler) named name (ReconcilerConfig.Name).
func (m *Metrics) AddReconciler(name string) {
	for _, r := range attemptResults {
		m.reconcilePasses.WithLabelValues(name, r)
	}
	for _, r := range reconcileResults {
		m.reconcileEvents.WithLabelValues(name, r)
	}
}

// AddConsumer creates, at zero, the series of a consumer of group group
// subscribed to topics.
func (m *Metrics) AddConsumer(group string, topics ...string) {
	for _, topic := range topics {
		for _, r := range consumerResults {
			m.consumed.WithLabelValues(group, topic, r)
		}
		m.consumeSeconds.WithLabelValues(group, topic)
		m.lateness.WithLabelValues(group, topic)
	}
}

// CheckBackCacheStats is a snapshot of a transactional producer's
// check-back outcome cache. It has the shape of txrmq.CheckBackCacheStats,
// so this module needs no import of that package.
type CheckBackCacheStats struct {
	// Entries is how many outcomes the cache holds.
	Entries int
	// Hits and Misses count the check-backs answered from the cache and
	// those it could not answer.
	Hits, Misses int64
	// Evicted counts outcomes dropped for size or age.
	Evicted int64
}

type watchedCache struct {
	group string
	stats func() CheckBackCacheStats
}

// WatchCheckBackCache makes m export the check-back cache of the
// transactional producer of producer group group at every scrape:
// txmsg_checkback_cache_lookups_total{group,result=hit|miss},
// txmsg_checkback_cache_evictions_total{group} and
// txmsg_checkback_cache_entries{group}. stats is usually
// (*txrmq.Transactional).CheckBackCacheStats; S is inferred. The series
// exist, at zero, from this call on.
func WatchCheckBackCache[S ~struct {
	Entries      int
	Hits, Misses int64
	Evicted      int64
}](m *Metrics, group string, stats func() S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.caches = append(m.caches, watchedCache{group: group, stats: func() CheckBackCacheStats { return CheckBackCacheStats(stats()) }})
}

func (m *Metrics) collectors() []prom.Collector {
	return []prom.Collector{
		m.halfSends, m.halfSendSeconds, m.localTx, m.localTxSeconds, m.invalidSends, m.checkBacks, m.checkBackSeconds, m.held,
		m.relayBatches, m.relayMessages, m.relayBatchSize, m.relayPublish, m.relayUnavailable, m.relayBrokerDown,
		m.consumed, m.consumeSeconds, m.lateness, m.reconcilePasses, m.reconcileEvents,
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prom.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	ch <- m.cacheLookups
	ch <- m.cacheEvictions
	ch <- m.cacheEntries
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prom.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	m.mu.Lock()
	caches := append([]watchedCache(nil), m.caches...)
	m.mu.Unlock()
	for _, c := range caches {
		s := c.stats()
		ch <- prom.MustNewConstMetric(m.cacheLookups, prom.CounterValue, float64(s.Hits), c.group, ResultHit)
		ch <- prom.MustNewConstMetric(m.cacheLookups, prom.CounterValue, float64(s.Misses), c.group, ResultMiss)
		ch <- prom.MustNewConstMetric(m.cacheEvictions, prom.CounterValue, float64(s.Evicted), c.group)
		ch <- prom.MustNewConstMetric(m.cacheEntries, prom.GaugeValue, float64(s.Entries), c.group)
	}
}

// OnHalfSent implements txmsg.HookHalfSent.
func (m *Metrics) OnHalfSent(_ context.Context, msg *txmsg.Message, err error, took time.Duration) {
	result := ResultOK
	if err != nil {
		result = ResultError
	}
	m.halfSends.WithLabelValues(msg.Topic, result).Inc()
	m.halfSendSeconds.WithLabelValues(msg.Topic).Observe(took.Seconds())
}

// OnLocalDone implements txmsg.HookLocalDone.
func (m *Metrics) OnLocalDone(_ context.Context, msg *txmsg.Message, state txmsg.LocalState, _ error, took time.Duration) {
	m.localTx.WithLabelValues(msg.Topic, outcome(state)).Inc()
	m.localTxSeconds.WithLabelValues(msg.Topic).Observe(took.Seconds())
}

// OnInvalidSend implements txmsg.HookInvalidSend.
func (m *Metrics) OnInvalidSend(_ context.Context, msg *txmsg.Message, _ error) {
	topic := ""
	if msg != nil {
		topic = msg.Topic
	}
	m.invalidSends.WithLabelValues(topic).Inc()
}

// OnCheckBack implements txmsg.HookCheckBack.
func (m *Metrics) OnCheckBack(group, _, topic string, state txmsg.LocalState, _ error, took time.Duration) {
	m.checkBacks.WithLabelValues(group, topic, outcome(state)).Inc()
	m.checkBackSeconds.WithLabelValues(group, topic).Observe(took.Seconds())
}

// OnHeld implements txmsg.HookHeld.
func (m *Metrics) OnHeld(group, _, topic string, _ error) {
	m.held.WithLabelValues(group, topic).Inc()
}

// OnReconciled implements txmsg.HookReconciled.
func (m *Metrics) OnReconciled(_ context.Context, reconciler string, checked, missing, republished int, err error, _ time.Duration) {
	result := ResultOK
	if err != nil {
		result = ResultError
	}
	m.reconcilePasses.WithLabelValues(reconciler, result).Inc()
	m.reconcileEvents.WithLabelValues(reconciler, ResultChecked).Add(float64(checked))
	m.reconcileEvents.WithLabelValues(reconciler, ResultMissing).Add(float64(missing))
	m.reconcileEvents.WithLabelValues(reconciler, ResultRepublished).Add(float64(republished))
}

func outcome(s txmsg.LocalState) string {
	switch s {
	case txmsg.StateCommitted:
		return ResultCommitted
	case txmsg.StateRolledBack:
		return ResultRolledBack
	default:
		return ResultUnknown
	}
}

// OnRelayBatch implements txmsg.HookRelayBatch.
func (m *Metrics) OnRelayBatch(_ context.Context, relay, table string, size, failed int, took time.Duration) {
	m.relayBatches.WithLabelValues(relay, table).Inc()
	m.relayMessages.WithLabelValues(relay, table, ResultOK).Add(float64(size - failed))
	m.relayMessages.WithLabelValues(relay, table, ResultError).Add(float64(failed))
	m.relayBatchSize.WithLabelValues(relay, table).Observe(float64(size))
	m.relayPublish.WithLabelValues(relay, table).Observe(took.Seconds())
	if failed < size {
		m.relayBrokerDown.WithLabelValues(relay, table).Set(0)
	}
}

// OnRelayUnavailable implements txmsg.HookRelayUnavailable.
func (m *Metrics) OnRelayUnavailable(_ context.Context, relay, table string, rows int, _ error) {
	m.relayUnavailable.WithLabelValues(relay, table).Add(float64(rows))
	m.relayBrokerDown.WithLabelValues(relay, table).Set(1)
}

// OnConsumed implements txmsg.HookConsumed.
func (m *Metrics) OnConsumed(_ context.Context, group string, r *txmsg.Received, oc txmsg.Outcome, err error, took time.Duration) {
	result := ResultError
	if err == nil {
		switch oc {
		case txmsg.OutcomeHandled:
			result = ResultHandled
		case txmsg.OutcomeDuplicate:
			result = ResultDuplicate
		case txmsg.OutcomeParked:
			result = ResultParked
		}
	}
	topic := ""
	if r != nil && r.Message != nil {
		topic = r.Message.Topic
	}
	m.consumed.WithLabelValues(group, topic, result).Inc()
	m.consumeSeconds.WithLabelValues(group, topic).Observe(took.Seconds())
	if result == ResultHandled && !r.DueAt.IsZero() {
		m.lateness.WithLabelValues(group, topic).Observe(max(r.Lateness(), 0).Seconds())
	}
}

// latenessBuckets are the buckets of txmsg_consumer_lateness_seconds: a
// delayed message normally arrives within a second or two of its due
// time; minutes mean a relay, forwarder or consumer was behind or down.
var latenessBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800}

package txprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	txprom "github.com/txmsg/txmsg/adapters/txprom"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

type event struct {
	N int `json:"n"`
}

// value returns the value of the series name{labels} in reg (counter,
// gauge, or a histogram's sample count), or -1 when it does not exist.
func value(t *testing.T, reg prom.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return sampleValue(m)
		}
	}
	return -1
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func names(t *testing.T, reg prom.Gatherer) []string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.GetName())
	}
	sort.Strings(out)
	return out
}

// TestTransactionalAndConsumerMetrics drives the transactional mode and a
// consumer through the real broker and database and watches the counters
// move: half sends, local outcomes, a check-back, and consumer outcomes.
func TestTransactionalAndConsumerMetrics(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	reg := prom.NewRegistry()
	m := txprom.New(txprom.Config{ConstLabels: prom.Labels{"service": "test"}})
	reg.MustRegister(m)

	chk, err := checker.New(db, checker.Config{Logger: log})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	pg := testbed.Name(t, "pg")
	tr, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: pg, Hooks: txmsg.Hooks{m},
		Topics: []string{topic},
	})
	require.NoError(t, err)
	m.AddTransactional(pg, topic)
	txprom.WatchCheckBackCache(m, pg, tr.CheckBackCacheStats)
	require.NoError(t, tr.Start(ctx))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })

	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Logger: log, Hooks: txmsg.Hooks{m}})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	group := testbed.Name(t, "cg")
	m.AddConsumer(group, topic)
	// Declared and no event yet: every series is there, at 0.
	require.Equal(t, 0.0, value(t, reg, "txmsg_half_sends_total", "topic", topic, "result", "error"))
	require.Equal(t, 0.0, value(t, reg, "txmsg_checkbacks_total", "group", pg, "topic", topic, "result", "unknown"))
	require.Equal(t, 0.0, value(t, reg, "txmsg_consumer_messages_total", "group", group, "topic", topic, "result", "error"))
	require.Equal(t, 0.0, value(t, reg, "txmsg_invalid_sends_total", "topic", topic))
	require.Equal(t, 0.0, value(t, reg, "txmsg_checkback_cache_lookups_total", "group", pg, "result", "hit"))
	var handled atomic.Int32
	cons, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[event]{Name: topic}, func(context.Context, *gorm.DB, txmsg.Delivery[event]) error {
		handled.Add(1)
		return nil
	})}, txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: group,
	})
	require.NoError(t, err)
	require.NoError(t, cons.Start(ctx))
	t.Cleanup(func() { _ = cons.Close(context.Background()) })

	producer, err := txmsg.NewProducer(tr, txmsg.Topic[event]{Name: topic})
	require.NoError(t, err)
	noop := func(context.Context, *gorm.DB) error { return nil }

	committed, err := producer.Send(ctx, event{N: 1}, noop)
	require.NoError(t, err)
	_, err = producer.Send(ctx, event{N: 2}, func(context.Context, *gorm.DB) error { return errors.New("business rule") })
	require.Error(t, err)

	// A local transaction still running when the broker checks back: the
	// producer answers UNKNOWN, and the transaction then commits.
	slow, err := producer.Send(ctx, event{N: 3}, func(context.Context, *gorm.DB) error {
		deadline := time.Now().Add(30 * time.Second)
		for value(t, reg, "txmsg_checkbacks_total", "group", pg, "topic", topic, "result", "unknown") < 1 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	})
	require.NoError(t, err)

	require.Equal(t, 3.0, value(t, reg, "txmsg_half_sends_total", "topic", topic, "result", "ok"))
	require.Equal(t, 3.0, value(t, reg, "txmsg_half_send_seconds", "topic", topic))
	require.Equal(t, 2.0, value(t, reg, "txmsg_local_transactions_total", "topic", topic, "result", "committed"))
	require.Equal(t, 1.0, value(t, reg, "txmsg_local_transactions_total", "topic", topic, "result", "rolled_back"))
	require.GreaterOrEqual(t, value(t, reg, "txmsg_checkbacks_total", "group", pg, "topic", topic, "result", "unknown"), 1.0)
	// The check-back goroutine observes the duration just after it counts
	// the answer that ended the wait above.
	require.Eventually(t, func() bool { return value(t, reg, "txmsg_checkback_seconds", "group", pg, "topic", topic) >= 1 }, 30*time.Second, 50*time.Millisecond,
		"the check-back's duration is observed")

	require.Eventually(t, func() bool {
		return value(t, reg, "txmsg_consumer_messages_total", "group", group, "topic", topic, "result", "handled") == 2
	}, 60*time.Second, 50*time.Millisecond, "both committed events are handled")
	require.Equal(t, int32(2), handled.Load())

	// The same event published again is a duplicate to the inbox.
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: testbed.Name(t, "plain")})
	require.NoError(t, err)
	require.NoError(t, pub.Start(ctx))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	require.NoError(t, pub.Publish(ctx, &txmsg.Message{ID: committed.ID, Topic: topic, Body: []byte(`{"n":1}`)}))
	require.Eventually(t, func() bool {
		return value(t, reg, "txmsg_consumer_messages_total", "group", group, "topic", topic, "result", "duplicate") == 1
	}, 60*time.Second, 50*time.Millisecond, "the copy is counted as a duplicate")
	require.Equal(t, int32(2), handled.Load())
	// The consumer observes the duration just after it counts the outcome.
	require.Eventually(t, func() bool {
		return value(t, reg, "txmsg_consumer_handle_seconds", "group", group, "topic", topic) == 3
	}, 30*time.Second, 50*time.Millisecond, "the three deliveries' durations are observed")
	require.NotEmpty(t, slow.ID)

	// A message validation refuses is counted, and nothing else is.
	_, err = tr.Transact(ctx, &txmsg.Message{Topic: topic}, noop)
	require.ErrorIs(t, err, txmsg.ErrInvalidMessage)
	require.Equal(t, 1.0, value(t, reg, "txmsg_invalid_sends_total", "topic", topic))
	require.Equal(t, 3.0, value(t, reg, "txmsg_half_sends_total", "topic", topic, "result", "ok"))

	// A check-back of a transaction that committed here is answered from
	// the outcome cache.
	st, err := tr.ResolveCheckBack(ctx, committed.ID, committed.BrokerMessageID)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateCommitted, st)
	require.Equal(t, float64(tr.CheckBackCacheStats().Hits), value(t, reg, "txmsg_checkback_cache_lookups_total", "group", pg, "result", "hit"))
	require.GreaterOrEqual(t, value(t, reg, "txmsg_checkback_cache_lookups_total", "group", pg, "result", "hit"), 1.0)
	require.Equal(t, float64(tr.CheckBackCacheStats().Entries), value(t, reg, "txmsg_checkback_cache_entries", "group", pg))

	for _, name := range names(t, reg) {
		require.True(t, strings.HasPrefix(name, "txmsg_"), name)
		require.False(t, strings.HasPrefix(name, "txmsg_relay_"), "a process without a relay exports no relay series: %s", name)
	}
}

// failingPublisher fails every message whose body says "fail".
type failingPublisher struct{ inner txmsg.Publisher }

func (p failingPublisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	errs := make([]error, len(msgs))
	var ok []*txmsg.Message
	var okIdx []int
	for i, m := range msgs {
		if string(m.Body) == `{"n":-1}` {
			errs[i] = fmt.Errorf("%w: refused by test", txmsg.ErrRejected)
			continue
		}
		ok = append(ok, m)
		okIdx = append(okIdx, i)
	}
	if len(ok) > 0 {
		if err := p.inner.Publish(ctx, ok...); err != nil {
			for _, i := range okIdx {
				errs[i] = err
			}
		}
	}
	if len(ok) == len(msgs) {
		return nil
	}
	return &txmsg.BatchError{Errs: errs}
}

// TestRelayAndOutboxCollector runs the local-table mode against the real
// broker and database: the outbox collector sees the pending rows and
// their age, the relay's batches are counted, and a failing row shows as a
// failed message.
func TestRelayAndOutboxCollector(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelError}))
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	reg := prom.NewRegistry()
	m := txprom.New(txprom.Config{ConstLabels: prom.Labels{"service": "test"}})
	reg.MustRegister(m)

	ob, err := outbox.New(db, outbox.Config{Logger: log, Hooks: txmsg.Hooks{m}})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))
	oc, err := txprom.NewOutboxCollector(ob.Stats, txprom.OutboxConfig{Table: ob.Table(), Metrics: m})
	require.NoError(t, err)
	reg.MustRegister(oc)

	producer, err := txmsg.NewProducer(ob, txmsg.Topic[event]{Name: topic})
	require.NoError(t, err)
	noop := func(context.Context, *gorm.DB) error { return nil }
	for n := range 3 {
		_, err := producer.Send(ctx, event{N: n}, noop)
		require.NoError(t, err)
	}
	_, err = producer.Send(ctx, event{N: -1}, noop)
	require.NoError(t, err)
	require.Equal(t, 4.0, value(t, reg, "txmsg_local_transactions_total", "topic", topic, "result", "committed"))
	require.Equal(t, -1.0, value(t, reg, "txmsg_half_sends_total"), "no half sends in local-table mode")
	_, err = ob.Transact(ctx, &txmsg.Message{Topic: topic}, noop)
	require.ErrorIs(t, err, txmsg.ErrInvalidMessage, "a message without a body")
	require.Equal(t, 1.0, value(t, reg, "txmsg_invalid_sends_total", "topic", topic))

	require.Eventually(t, func() bool {
		return value(t, reg, "txmsg_outbox_oldest_pending_age_seconds", "table", ob.Table()) > 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 1.0, value(t, reg, "txmsg_outbox_stats_up", "table", ob.Table()))
	require.Equal(t, 4.0, value(t, reg, "txmsg_outbox_rows", "table", ob.Table(), "status", "pending"))
	require.Equal(t, 0.0, value(t, reg, "txmsg_outbox_rows", "table", ob.Table(), "status", "sent"))

	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: testbed.Name(t, "relay"), Topics: []string{topic}})
	require.NoError(t, err)
	require.NoError(t, pub.Start(ctx))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	relay, err := outbox.NewRelay(ob, failingPublisher{pub}, outbox.RelayConfig{
		Logger: log, Hooks: txmsg.Hooks{m}, MaxAttempts: 1, PollInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	m.AddRelay(relay.Name(), ob.Table())
	rl := []string{"relay", relay.Name(), "table", ob.Table()}
	require.Equal(t, 0.0, value(t, reg, "txmsg_relay_messages_total", append(rl, "result", "error")...))
	require.Equal(t, 0.0, value(t, reg, "txmsg_relay_broker_unavailable", rl...))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	require.Eventually(t, func() bool {
		return value(t, reg, "txmsg_outbox_rows", "table", ob.Table(), "status", "sent") == 3 &&
			value(t, reg, "txmsg_outbox_rows", "table", ob.Table(), "status", "parked") == 1
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, 0.0, value(t, reg, "txmsg_outbox_rows", "table", ob.Table(), "status", "pending"))
	require.Equal(t, 0.0, value(t, reg, "txmsg_outbox_oldest_pending_age_seconds", "table", ob.Table()))
	require.GreaterOrEqual(t, value(t, reg, "txmsg_relay_batches_total", rl...), 1.0)
	require.Equal(t, 3.0, value(t, reg, "txmsg_relay_messages_total", append(rl, "result", "ok")...))
	require.Equal(t, 1.0, value(t, reg, "txmsg_relay_messages_total", append(rl, "result", "error")...))
	require.Equal(t, value(t, reg, "txmsg_relay_batches_total", rl...), value(t, reg, "txmsg_relay_batch_size", rl...))
	require.Equal(t, value(t, reg, "txmsg_relay_batches_total", rl...), value(t, reg, "txmsg_relay_publish_seconds", rl...))

	// Config.ConstLabels reach every series, the outbox collector's too.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			require.True(t, slices.ContainsFunc(s.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == "service" && l.GetValue() == "test"
			}), "%s carries the constant label", mf.GetName())
		}
	}
}

// TestRelayUnavailableMetrics: a relay whose publisher reaches no name
// server counts the waiting messages, raises the broker-unavailable gauge
// and the outbox's waiting rows, and lowers them once it publishes.
func TestRelayUnavailableMetrics(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelError}))
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	reg := prom.NewRegistry()
	m := txprom.New(txprom.Config{})
	reg.MustRegister(m)
	ob, err := outbox.New(db, outbox.Config{Logger: log})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))
	oc, err := txprom.NewOutboxCollector(ob.Stats, txprom.OutboxConfig{Table: ob.Table()})
	require.NoError(t, err)
	reg.MustRegister(oc)

	// Both relays have one name, so they feed one series.
	name := testbed.Name(t, "relay")
	rl := []string{"relay", name, "table", ob.Table()}
	start := func(nameServer string) func() {
		pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{nameServer}, Logger: log}, Group: testbed.Name(t, "relay"), SendTimeout: time.Second, Retries: 1})
		require.NoError(t, err)
		require.NoError(t, pub.Start(ctx))
		relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{
			Logger: log, Hooks: txmsg.Hooks{m}, MaxAttempts: 1, Name: name,
			PollInterval: 20 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		})
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(runCtx) }()
		return func() { stop(); <-done; _ = pub.Close(context.Background()) }
	}
	stop := start("127.0.0.1:1")
	_, err = ob.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte("x")}, func(context.Context, *gorm.DB) error { return nil })
	require.NoError(t, err)
	require.Eventually(t, func() bool { return value(t, reg, "txmsg_relay_unavailable_total", rl...) >= 3 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 1.0, value(t, reg, "txmsg_relay_broker_unavailable", rl...))
	require.Equal(t, 1.0, value(t, reg, "txmsg_outbox_waiting_rows", "table", ob.Table()))
	require.Equal(t, 0.0, value(t, reg, "txmsg_outbox_rows", "table", ob.Table(), "status", "parked"), "MaxAttempts 1, and still not parked")
	stop()

	stop = start(testbed.NameServer())
	t.Cleanup(stop)
	require.Eventually(t, func() bool {
		return value(t, reg, "txmsg_outbox_rows", "table", ob.Table(), "status", "sent") == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 0.0, value(t, reg, "txmsg_relay_broker_unavailable", rl...))
	require.Equal(t, 0.0, value(t, reg, "txmsg_outbox_waiting_rows", "table", ob.Table()))
}

// TestOutboxCollectorReportsQueryFailure checks that a failing or slow
// stats query yields txmsg_outbox_stats_up 0 and no stale gauges.
func TestOutboxCollectorReportsQueryFailure(t *testing.T) {
	t.Parallel()
	reg := prom.NewRegistry()
	oc, err := txprom.NewOutboxCollector(func(ctx context.Context) (txprom.OutboxStats, error) {
		<-ctx.Done()
		return txprom.OutboxStats{}, fmt.Errorf("stats: %w", ctx.Err())
	}, txprom.OutboxConfig{Table: "orders_outbox", Timeout: 20 * time.Millisecond})
	require.NoError(t, err)
	reg.MustRegister(oc)
	require.Equal(t, 0.0, value(t, reg, "txmsg_outbox_stats_up", "table", "orders_outbox"))
	require.Equal(t, -1.0, value(t, reg, "txmsg_outbox_rows"))

	_, err = txprom.NewOutboxCollector[txprom.OutboxStats](nil, txprom.OutboxConfig{})
	require.Error(t, err)
}

// TestLatenessMetric: a handled delayed message observes how long after
// its due time it was received; other messages and outcomes do not.
func TestLatenessMetric(t *testing.T) {
	t.Parallel()
	m := txprom.New(txprom.Config{})
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	due := time.Now().Add(-1500 * time.Millisecond)
	delayed := &txmsg.Received{Message: &txmsg.Message{Topic: "t"}, DueAt: due, ReceivedAt: due.Add(1500 * time.Millisecond)}
	plain := &txmsg.Received{Message: &txmsg.Message{Topic: "t"}, ReceivedAt: time.Now()}
	m.OnConsumed(context.Background(), "g", delayed, txmsg.OutcomeHandled, nil, time.Millisecond)
	m.OnConsumed(context.Background(), "g", delayed, txmsg.OutcomeDuplicate, nil, time.Millisecond)
	m.OnConsumed(context.Background(), "g", plain, txmsg.OutcomeHandled, nil, time.Millisecond)
	require.Equal(t, 1.0, value(t, reg, "txmsg_consumer_lateness_seconds", "group", "g", "topic", "t"))
	require.Equal(t, 1500*time.Millisecond, delayed.Lateness())
	require.Zero(t, plain.Lateness())
}

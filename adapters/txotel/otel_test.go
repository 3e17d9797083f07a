package txotel_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	txotel "github.com/txmsg/txmsg/adapters/txotel"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

type event struct {
	N int `json:"n"`
}

func newTracing() (*txotel.Tracing, *tracetest.SpanRecorder, trace.Tracer) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	return txotel.New(txotel.Config{TracerProvider: tp}), rec, tp.Tracer("test")
}

func spanNamed(rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	for _, s := range rec.Ended() {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// TestPropertiesPassValidation checks, without a broker, that what the
// hook writes is a valid message, and that the consumer side continues
// the trace and ends its span with the outcome.
func TestPropertiesPassValidation(t *testing.T) {
	t.Parallel()
	tr, rec, tracer := newTracing()
	ctx, root := tracer.Start(context.Background(), "root")
	ts := trace.TraceState{}
	ts, err := ts.Insert("vendor", "v1")
	require.NoError(t, err)
	ctx = trace.ContextWithSpanContext(ctx, root.SpanContext().WithTraceState(ts))

	msg := &txmsg.Message{Topic: "orders", Tag: "created", Keys: []string{"o-1"}, Body: []byte(`{}`)}
	driver.BeforeSend(txmsg.Hooks{tr}, ctx, msg)
	require.NotEmpty(t, msg.ID, "the ID is assigned early so the span carries it")
	require.NoError(t, msg.Validate(0))
	require.Contains(t, msg.Properties, "traceparent")
	require.Equal(t, "vendor=v1", msg.Properties["tracestate"])
	for k := range msg.Properties {
		require.False(t, driver.ReservedProperty(k), k)
	}

	in := &txmsg.Received{Message: msg.Clone(), Attempt: 2}
	hctx := driver.BeforeHandle(txmsg.Hooks{tr}, context.Background(), "inventory", in)
	require.Equal(t, root.SpanContext().TraceID(), trace.SpanContextFromContext(hctx).TraceID())
	driver.Consumed(txmsg.Hooks{tr}, hctx, "inventory", in, 0, errors.New("stock table locked\nmore"), time.Millisecond)
	root.End()

	create := spanNamed(rec, "create orders")
	process := spanNamed(rec, "process orders")
	require.NotNil(t, create)
	require.NotNil(t, process)
	require.Equal(t, trace.SpanKindProducer, create.SpanKind())
	require.Equal(t, root.SpanContext().SpanID(), create.Parent().SpanID())
	require.Equal(t, trace.SpanKindConsumer, process.SpanKind())
	require.Equal(t, create.SpanContext().SpanID(), process.Parent().SpanID())
	require.True(t, process.Parent().IsRemote())
	require.Equal(t, codes.Error, process.Status().Code)
	require.Equal(t, "stock table locked", process.Status().Description)
	attrs := map[string]string{}
	for _, kv := range process.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	require.Equal(t, msg.ID, attrs["messaging.message.id"])
	require.Equal(t, "inventory", attrs["messaging.consumer.group.name"])
	require.Equal(t, "failed", attrs["txmsg.outcome"])
	require.Equal(t, "2", attrs["txmsg.attempt"])
}

// TestNoTraceContextStartsNewTrace checks that a message without trace
// properties gets a root process span and that a caller without a span
// still links producer and consumer through the create span.
func TestNoTraceContextStartsNewTrace(t *testing.T) {
	t.Parallel()
	tr, rec, _ := newTracing()
	ctx := driver.BeforeHandle(txmsg.Hooks{tr}, context.Background(), "g", &txmsg.Received{Message: &txmsg.Message{ID: "x", Topic: "t"}})
	require.True(t, trace.SpanContextFromContext(ctx).IsValid())
	driver.Consumed(txmsg.Hooks{tr}, ctx, "g", nil, txmsg.OutcomeDuplicate, nil, 0)
	require.False(t, spanNamed(rec, "process t").Parent().IsValid())

	msg := &txmsg.Message{Topic: "t"}
	driver.BeforeSend(txmsg.Hooks{tr}, context.Background(), msg)
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(msg.Properties)))
	require.Equal(t, spanNamed(rec, "create t").SpanContext().TraceID(), sc.TraceID())
}

// handlerTraces records the trace ID each handler call saw, by txmsg ID.
type handlerTraces struct {
	mu  sync.Mutex
	ids map[string]trace.TraceID
}

func (h *handlerTraces) get(id string) (trace.TraceID, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.ids[id]
	return v, ok
}

// startConsumer starts a consumer of topic whose handler records the
// trace ID of its context.
func startConsumer(t *testing.T, db *gorm.DB, topic string, tr *txotel.Tracing, log *slog.Logger) *handlerTraces {
	t.Helper()
	ctx := context.Background()
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Logger: log, Hooks: txmsg.Hooks{tr}})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	seen := &handlerTraces{ids: map[string]trace.TraceID{}}
	cons, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[event]{Name: topic}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[event]) error {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		seen.ids[d.Message.ID] = trace.SpanContextFromContext(ctx).TraceID()
		return nil
	})}, txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: testbed.Name(t, "cg"),
	})
	require.NoError(t, err)
	require.NoError(t, cons.Start(ctx))
	t.Cleanup(func() { _ = cons.Close(context.Background()) })
	return seen
}

// TestTraceReachesHandlerTransactional sends through the transactional
// producer and the real broker; the handler's context carries the
// producer's trace.
func TestTraceReachesHandlerTransactional(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	tr, rec, tracer := newTracing()
	db := testbed.DB(t)
	topic := testbed.Topic(t)

	chk, err := checker.New(db, checker.Config{Logger: log})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	prod, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: testbed.Name(t, "pg"), Hooks: txmsg.Hooks{tr},
		Topics: []string{topic},
	})
	require.NoError(t, err)
	require.NoError(t, prod.Start(ctx))
	t.Cleanup(func() { _ = prod.Close(context.Background()) })
	seen := startConsumer(t, db, topic, tr, log)

	sendCtx, root := tracer.Start(ctx, "place-order")
	events, err := txmsg.NewProducer(prod, txmsg.Topic[event]{Name: topic})
	require.NoError(t, err)
	receipt, err := events.Send(sendCtx, event{N: 1}, func(context.Context, *gorm.DB) error { return nil })
	require.NoError(t, err)
	root.End()

	require.Eventually(t, func() bool { _, ok := seen.get(receipt.ID); return ok }, 60*time.Second, 20*time.Millisecond)
	got, _ := seen.get(receipt.ID)
	require.Equal(t, root.SpanContext().TraceID(), got, "the handler runs in the producer's trace")

	require.Eventually(t, func() bool { return spanNamed(rec, "process "+topic) != nil }, 10*time.Second, 20*time.Millisecond)
	process := spanNamed(rec, "process "+topic)
	create := spanNamed(rec, "create "+topic)
	require.Equal(t, create.SpanContext().SpanID(), process.Parent().SpanID())
	var names []string
	for _, e := range spanNamed(rec, "place-order").Events() {
		names = append(names, e.Name)
	}
	require.Equal(t, []string{"txmsg.half_sent", "txmsg.local_done"}, names)
}

// TestTraceReachesHandlerOutbox does the same through the outbox table and
// the relay: the trace context survives the row.
func TestTraceReachesHandlerOutbox(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	tr, _, tracer := newTracing()
	db := testbed.DB(t)
	topic := testbed.Topic(t)

	ob, err := outbox.New(db, outbox.Config{Logger: log, Hooks: txmsg.Hooks{tr}})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: testbed.Name(t, "relay"), Topics: []string{topic}})
	require.NoError(t, err)
	require.NoError(t, pub.Start(ctx))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{Logger: log})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	seen := startConsumer(t, db, topic, tr, log)

	sendCtx, root := tracer.Start(ctx, "place-order")
	events, err := txmsg.NewProducer(ob, txmsg.Topic[event]{Name: topic})
	require.NoError(t, err)
	receipt, err := events.Send(sendCtx, event{N: 1}, func(context.Context, *gorm.DB) error { return nil })
	require.NoError(t, err)
	root.End()

	require.Eventually(t, func() bool { _, ok := seen.get(receipt.ID); return ok }, 60*time.Second, 20*time.Millisecond)
	got, _ := seen.get(receipt.ID)
	require.Equal(t, root.SpanContext().TraceID(), got)
}

// TestConfigWithDefaultsThenValidate: the zero config, defaulted, is
// valid; Validate alone refuses it and names the field.
func TestConfigWithDefaultsThenValidate(t *testing.T) {
	require.NoError(t, txotel.Config{}.WithDefaults().Validate())
	err := txotel.Config{}.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "TracerProvider")
}

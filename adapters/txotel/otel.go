// Package txotel carries OpenTelemetry trace context from a txmsg producer to
// the consumer that handles the event, through the broker.
//
// It lives in its own Go module and depends only on the OpenTelemetry API;
// the program chooses the SDK and exporter. [Tracing] implements txmsg's
// hooks: put it in the Hooks of the producer side (txrmq.TransactionalConfig.Hooks
// or outbox.Config.Hooks) and of the consumer side
// (txmsg.InboxConfig.Hooks).
//
// On the producer side, BeforeSend starts and ends a "create <topic>"
// span of kind producer, a child of the caller's span, and writes its
// context into the message's properties with the configured propagator:
// by default W3C Trace Context, as the properties "traceparent" and
// "tracestate". They travel with the message through the half message or
// the outbox row. On the consumer side, BeforeHandle reads them and starts
// a "process <topic>" span of kind consumer, a child of the create span;
// the handler's ctx carries it, so the handler's own spans join the
// producer's trace. OnConsumed ends it with the outcome.
package txotel

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txmsg/txmsg/txmsg"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/txmsg/txmsg/adapters/txotel"

// Config configures [New]. The zero value is usable.
type Config struct {
	// TracerProvider starts the spans. Default: the global provider,
	// otel.GetTracerProvider(), read once by New.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into message properties and
	// reads it back. Default propagation.TraceContext{} (W3C traceparent
	// and tracestate), not the global propagator, which is a no-op unless
	// the program sets one. Property names it writes must be allowed by
	// txmsg.Message.Validate (not reserved, no \x01 or \x02).
	Propagator propagation.TextMapPropagator
}

// WithDefaults returns c with its zero fields set to their defaults: the
// global TracerProvider, the W3C trace-context propagator. It checks
// nothing; see [Config.Validate].
func (c Config) WithDefaults() Config {
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	return c
}

// Validate checks a config that went through [Config.WithDefaults]: a
// field left nil is refused. Its errors wrap txmsg.ErrInvalidConfig and
// name the field. [New] applies WithDefaults, so it never gets a config
// Validate refuses.
func (c Config) Validate() error {
	if c.TracerProvider == nil {
		return fmt.Errorf("%w: txotel: TracerProvider is nil; call WithDefaults first", txmsg.ErrInvalidConfig)
	}
	if c.Propagator == nil {
		return fmt.Errorf("%w: txotel: Propagator is nil; call WithDefaults first", txmsg.ErrInvalidConfig)
	}
	return nil
}

// Tracing is the tracing hook. It is safe for concurrent use.
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

var (
	_ txmsg.HookBeforeSend   = (*Tracing)(nil)
	_ txmsg.HookHalfSent     = (*Tracing)(nil)
	_ txmsg.HookLocalDone    = (*Tracing)(nil)
	_ txmsg.HookBeforeHandle = (*Tracing)(nil)
	_ txmsg.HookConsumed     = (*Tracing)(nil)
)

// New returns a Tracing hook.
func New(cfg Config) *Tracing {
	cfg = cfg.WithDefaults()
	return &Tracing{tracer: cfg.TracerProvider.Tracer(ScopeName), prop: cfg.Propagator}
}

// Attribute keys, from OpenTelemetry's messaging conventions where one
// fits.
const (
	keySystem      = attribute.Key("messaging.system")
	keyDestination = attribute.Key("messaging.destination.name")
	keyOperation   = attribute.Key("messaging.operation.type")
	keyMessageID   = attribute.Key("messaging.message.id")
	keyGroup       = attribute.Key("messaging.consumer.group.name")
	keyTag         = attribute.Key("messaging.rocketmq.message.tag")
	keyKeys        = attribute.Key("messaging.rocketmq.message.keys")
	keyAttempt     = attribute.Key("txmsg.attempt")
	keyOutcome     = attribute.Key("txmsg.outcome")
	keyState       = attribute.Key("txmsg.state")
)

// BeforeSend implements txmsg.HookBeforeSend. It gives the message its
// txmsg ID now when it has none (so the span records it), starts and ends
// a create span under ctx's span, and injects that span's context into
// msg.Properties.
func (t *Tracing) BeforeSend(ctx context.Context, msg *txmsg.Message) {
	if msg.ID == "" {
		msg.ID = txmsg.NewID()
	}
	attrs := []attribute.KeyValue{
		keySystem.String("rocketmq"),
		keyDestination.String(msg.Topic),
		keyOperation.String("create"),
		keyMessageID.String(msg.ID),
	}
	if msg.Tag != "" {
		attrs = append(attrs, keyTag.String(msg.Tag))
	}
	if len(msg.Keys) > 0 {
		attrs = append(attrs, keyKeys.StringSlice(msg.Keys))
	}
	ctx, span := t.tracer.Start(ctx, "create "+msg.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()
	if msg.Properties == nil {
		msg.Properties = map[string]string{}
	}
	t.prop.Inject(ctx, propagation.MapCarrier(msg.Properties))
}

// OnHalfSent implements txmsg.HookHalfSent: an event on the caller's span.
func (t *Tracing) OnHalfSent(ctx context.Context, msg *txmsg.Message, err error, took time.Duration) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{keyMessageID.String(msg.ID), attribute.Int64("txmsg.took_us", took.Microseconds())}
	if err != nil {
		attrs = append(attrs, attribute.String("error.message", err.Error()))
	}
	span.AddEvent("txmsg.half_sent", trace.WithAttributes(attrs...))
}

// OnLocalDone implements txmsg.HookLocalDone: an event on the caller's
// span with the local transaction's state.
func (t *Tracing) OnLocalDone(ctx context.Context, msg *txmsg.Message, state txmsg.LocalState, err error, took time.Duration) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{keyMessageID.String(msg.ID), keyState.String(state.String()), attribute.Int64("txmsg.took_us", took.Microseconds())}
	if err != nil {
		attrs = append(attrs, attribute.String("error.message", err.Error()))
	}
	span.AddEvent("txmsg.local_done", trace.WithAttributes(attrs...))
}

// spanKey marks the consumer span this hook started in the handler's
// context, so OnConsumed ends that span and no other.
type spanKey struct{}

// BeforeHandle implements txmsg.HookBeforeHandle: it extracts the trace
// context from the message's properties and returns ctx with a process
// span, its child.
func (t *Tracing) BeforeHandle(ctx context.Context, group string, r *txmsg.Received) context.Context {
	if r == nil || r.Message == nil {
		return ctx
	}
	m := r.Message
	ctx = t.prop.Extract(ctx, propagation.MapCarrier(m.Properties))
	attrs := []attribute.KeyValue{
		keySystem.String("rocketmq"),
		keyDestination.String(m.Topic),
		keyOperation.String("process"),
		keyMessageID.String(m.ID),
		keyGroup.String(group),
		keyAttempt.Int(r.Attempt),
	}
	if m.Tag != "" {
		attrs = append(attrs, keyTag.String(m.Tag))
	}
	ctx, span := t.tracer.Start(ctx, "process "+m.Topic, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, spanKey{}, span)
}

// OnConsumed implements txmsg.HookConsumed: it ends the process span,
// recording the outcome, or the error when the message will be delivered
// again.
func (t *Tracing) OnConsumed(ctx context.Context, _ string, _ *txmsg.Received, outcome txmsg.Outcome, err error, _ time.Duration) {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	if err != nil {
		span.SetAttributes(keyOutcome.String("failed"))
		span.RecordError(err)
		span.SetStatus(codes.Error, firstLine(err.Error()))
	} else {
		span.SetAttributes(keyOutcome.String(outcome.String()))
	}
	span.End()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

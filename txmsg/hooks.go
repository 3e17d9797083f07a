package txmsg

import (
	"context"
	"time"
)

// Hook is a value that implements one or more of the Hook… interfaces
// below. Components take a []Hook in their config and call, for each
// event, the hooks that implement that event's interface; others are
// skipped. Hooks run on the calling goroutine, inline: keep them fast and
// never block. A panicking hook is recovered and ignored.
//
// Metrics and tracing live in optional packages built on these
// interfaces, each a Go module of its own (adapters/txprom,
// adapters/txotel), so the core imports neither Prometheus nor
// OpenTelemetry.
type Hook any

// HookBeforeSend is called by both modes' Transact before the message is
// validated (msg.ID may still be empty), so it may add properties (a trace
// context, for example); what it adds is validated like the rest.
type HookBeforeSend interface {
	BeforeSend(ctx context.Context, msg *Message)
}

// HookHalfSent is called in transactional mode when the half message was
// sent (err nil) or failed to send. It runs before the local transaction.
type HookHalfSent interface {
	OnHalfSent(ctx context.Context, msg *Message, err error, took time.Duration)
}

// HookLocalDone is called when the local transaction has committed or
// rolled back (state says which, err why), before the broker is told.
type HookLocalDone interface {
	OnLocalDone(ctx context.Context, msg *Message, state LocalState, err error, took time.Duration)
}

// HookCheckBack is called after each broker check-back was answered:
// state is the answer (StateUnknown with the error when the database could
// not answer).
type HookCheckBack interface {
	OnCheckBack(txID, topic string, state LocalState, err error, took time.Duration)
}

// HookHeld is called when the outcome of a transactional message cannot be
// known because its barrier row may have been purged (the transaction is
// older than the purge horizon). The message is kept where an operator sees
// it, never dropped: the sweeper parks it in the dead-letter table (or
// leaves it on the broker), and a check-back answers UNKNOWN. err says why.
type HookHeld interface {
	OnHeld(txID, topic string, err error)
}

// HookRelayBatch is called after a relay published a batch: size rows
// claimed, failed of them not published, took the publish time.
type HookRelayBatch interface {
	OnRelayBatch(ctx context.Context, size, failed int, took time.Duration)
}

// HookBeforeHandle is called before a consumer handles a message; the
// returned context is the handler's (a tracing hook starts a span from the
// message's trace properties here). Returning nil keeps ctx.
type HookBeforeHandle interface {
	BeforeHandle(ctx context.Context, group string, r *Received) context.Context
}

// HookConsumed is called after a consumer decided about a message: outcome
// when err is nil (handled, duplicate, parked); err non-nil means it will be
// delivered again.
type HookConsumed interface {
	OnConsumed(ctx context.Context, group string, r *Received, outcome Outcome, err error, took time.Duration)
}

// Hooks is a list of hooks with one dispatch method per event.
type Hooks []Hook

func safe(fn func()) {
	defer func() { _ = recover() }()
	fn()
}

// BeforeSend calls every HookBeforeSend.
func (hs Hooks) BeforeSend(ctx context.Context, msg *Message) {
	for _, h := range hs {
		if h, ok := h.(HookBeforeSend); ok {
			safe(func() { h.BeforeSend(ctx, msg) })
		}
	}
}

// HalfSent calls every HookHalfSent.
func (hs Hooks) HalfSent(ctx context.Context, msg *Message, err error, took time.Duration) {
	for _, h := range hs {
		if h, ok := h.(HookHalfSent); ok {
			safe(func() { h.OnHalfSent(ctx, msg, err, took) })
		}
	}
}

// LocalDone calls every HookLocalDone.
func (hs Hooks) LocalDone(ctx context.Context, msg *Message, state LocalState, err error, took time.Duration) {
	for _, h := range hs {
		if h, ok := h.(HookLocalDone); ok {
			safe(func() { h.OnLocalDone(ctx, msg, state, err, took) })
		}
	}
}

// CheckBack calls every HookCheckBack.
func (hs Hooks) CheckBack(txID, topic string, state LocalState, err error, took time.Duration) {
	for _, h := range hs {
		if h, ok := h.(HookCheckBack); ok {
			safe(func() { h.OnCheckBack(txID, topic, state, err, took) })
		}
	}
}

// Held calls every HookHeld.
func (hs Hooks) Held(txID, topic string, err error) {
	for _, h := range hs {
		if h, ok := h.(HookHeld); ok {
			safe(func() { h.OnHeld(txID, topic, err) })
		}
	}
}

// RelayBatch calls every HookRelayBatch.
func (hs Hooks) RelayBatch(ctx context.Context, size, failed int, took time.Duration) {
	for _, h := range hs {
		if h, ok := h.(HookRelayBatch); ok {
			safe(func() { h.OnRelayBatch(ctx, size, failed, took) })
		}
	}
}

// BeforeHandle calls every HookBeforeHandle, threading the context.
func (hs Hooks) BeforeHandle(ctx context.Context, group string, r *Received) context.Context {
	for _, h := range hs {
		if h, ok := h.(HookBeforeHandle); ok {
			safe(func() {
				if c := h.BeforeHandle(ctx, group, r); c != nil {
					ctx = c
				}
			})
		}
	}
	return ctx
}

// Consumed calls every HookConsumed.
func (hs Hooks) Consumed(ctx context.Context, group string, r *Received, outcome Outcome, err error, took time.Duration) {
	for _, h := range hs {
		if h, ok := h.(HookConsumed); ok {
			safe(func() { h.OnConsumed(ctx, group, r, outcome, err, took) })
		}
	}
}

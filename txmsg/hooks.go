package txmsg

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Hook is a value that implements one or more of the Hook… interfaces
// below. Components take a []Hook in their config and call, for each
// event, the hooks that implement that event's interface; others are
// skipped. Hooks run on the calling goroutine, inline: keep them fast and
// never block.
//
// Components refuse, with [ErrInvalidConfig], a hook that implements none
// of the interfaces (see [Hooks.Validate]). A panicking hook is recovered:
// the event goes on to the other hooks and the component carries on. The
// first panic of each hook in each kind of event is logged at error level
// with its stack, to the component's Logger (or slog.Default() when the
// hooks are called directly); later ones of the same hook and kind are not
// logged again.
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
// group is the producer group that answered it, topic the message's topic
// (empty when not known), state the answer (StateUnknown with the error
// when the database could not answer).
type HookCheckBack interface {
	OnCheckBack(group, txID, topic string, state LocalState, err error, took time.Duration)
}

// HookHeld is called when the outcome of a transactional message cannot be
// known because its barrier row may have been purged (the transaction is
// older than the purge horizon). The message is kept where an operator sees
// it, never dropped: the sweeper parks it in the inbox's parked table (or
// leaves it on the broker), and a check-back answers UNKNOWN. err says why.
// group is the consumer group of the sweeper that held it.
type HookHeld interface {
	OnHeld(group, txID, topic string, err error)
}

// HookRelayBatch is called after a relay published a batch: relay is the
// relay's name, table its outbox table, size rows claimed, failed of them
// not published, took the publish time.
type HookRelayBatch interface {
	OnRelayBatch(ctx context.Context, relay, table string, size, failed int, took time.Duration)
}

// HookRelayUnavailable is called after a relay's Publish call in which
// rows messages failed because the broker or the route to it was
// unavailable (see [IsUnavailable]), err the first such error. Those rows
// wait for the broker without counting an attempt, however long it stays
// away. It comes just before the call's HookRelayBatch.
// relay and table name the relay as in HookRelayBatch.
type HookRelayUnavailable interface {
	OnRelayUnavailable(ctx context.Context, relay, table string, rows int, err error)
}

// HookInvalidSend is called by both modes' Transact when Message.Validate
// refused the message (err wraps [ErrInvalidMessage]; msg may be nil),
// before anything was written: neither the local transaction nor the
// broker saw it.
type HookInvalidSend interface {
	OnInvalidSend(ctx context.Context, msg *Message, err error)
}

// HookReconciled is called after a reconciler checked the committed
// events of a window against the broker: reconciler names it, checked
// counts the events looked up, missing those the broker no longer had,
// republished those of the missing that were published again; err is
// why the pass ended early, nil when it checked the whole window.
type HookReconciled interface {
	OnReconciled(ctx context.Context, reconciler string, checked, missing, republished int, err error, took time.Duration)
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

// Hooks is a list of hooks. Components call them for each event through
// the dispatch functions of package [github.com/txmsg/txmsg/txmsg/driver].
type Hooks []Hook

// hookKind is one event of the hook interfaces.
type hookKind int

const (
	kindBeforeSend hookKind = iota
	kindHalfSent
	kindLocalDone
	kindCheckBack
	kindHeld
	kindRelayBatch
	kindRelayUnavailable
	kindBeforeHandle
	kindConsumed
	kindInvalidSend
	kindReconciled
	numHookKinds
)

var hookKindNames = [numHookKinds]string{"BeforeSend", "OnHalfSent", "OnLocalDone", "OnCheckBack", "OnHeld", "OnRelayBatch", "OnRelayUnavailable", "BeforeHandle", "OnConsumed", "OnInvalidSend", "OnReconciled"}

// isHook reports whether h implements at least one hook interface.
func isHook(h Hook) bool {
	switch h.(type) {
	case HookBeforeSend, HookHalfSent, HookLocalDone, HookCheckBack, HookHeld, HookRelayBatch, HookRelayUnavailable, HookBeforeHandle, HookConsumed, HookInvalidSend, HookReconciled:
		return true
	}
	return false
}

// Validate returns an error wrapping [ErrInvalidConfig] when a hook is nil
// or implements none of the hook interfaces: such a value would never be
// called, which is almost always a mistake (a value passed instead of a
// pointer whose methods have pointer receivers, for example).
func (hs Hooks) Validate() error {
	for i, h := range hs {
		if b, ok := h.(*boundHook); ok {
			h = b.h
		}
		switch {
		case h == nil:
			return fmt.Errorf("%w: hook %d is nil", ErrInvalidConfig, i)
		case !isHook(h):
			return fmt.Errorf("%w: hook %d (%T) implements none of txmsg's hook interfaces (HookBeforeSend, HookHalfSent, HookLocalDone, HookCheckBack, HookHeld, HookRelayBatch, HookRelayUnavailable, HookBeforeHandle, HookConsumed, HookInvalidSend, HookReconciled); check its method names and receivers", ErrInvalidConfig, i, h)
		}
	}
	return nil
}

// bind validates hs (see [Hooks.Validate]) and returns hooks that log a
// hook's first panic of each kind of event to log (nil means
// slog.Default()). Components call it on the hooks of their config.
func (hs Hooks) bind(log *slog.Logger) (Hooks, error) {
	if err := hs.Validate(); err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	out := make(Hooks, len(hs))
	for i, h := range hs {
		if b, ok := h.(*boundHook); ok {
			h = b.h
		}
		out[i] = &boundHook{h: h, log: log}
	}
	return out, nil
}

// boundHook is a hook with the logger its panics go to and the kinds of
// event whose panic was logged already.
type boundHook struct {
	h      Hook
	log    *slog.Logger
	logged [numHookKinds]atomic.Bool
}

// unboundLogged records, for hooks called without Bind, which (hook, kind)
// panics were logged to slog.Default() already.
var unboundLogged sync.Map

// hookIdentity tells hooks apart: pointers by address, other values by
// type (they may not be comparable).
func hookIdentity(h Hook) any {
	v := reflect.ValueOf(h)
	if v.Kind() == reflect.Pointer {
		return v.Pointer()
	}
	return v.Type()
}

// safe runs fn, h's handler of kind, and recovers a panic: logged once per
// hook and kind.
func safe(h Hook, kind hookKind, fn func()) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		log, first := slog.Default(), false
		if b, ok := h.(*boundHook); ok {
			log, first, h = b.log, b.logged[kind].CompareAndSwap(false, true), b.h
		} else {
			_, seen := unboundLogged.LoadOrStore([2]any{hookIdentity(h), kind}, true)
			first = !seen
		}
		if first {
			log.Error("a txmsg hook panicked; recovered, and later panics of this hook in "+hookKindNames[kind]+" are not logged",
				"hook", fmt.Sprintf("%T", h), "event", hookKindNames[kind], "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// inner returns the hook a bound hook wraps, or h itself.
func inner(h Hook) Hook {
	if b, ok := h.(*boundHook); ok {
		return b.h
	}
	return h
}

// beforeSend calls every HookBeforeSend.
func (hs Hooks) beforeSend(ctx context.Context, msg *Message) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookBeforeSend); ok {
			safe(hk, kindBeforeSend, func() { h.BeforeSend(ctx, msg) })
		}
	}
}

// halfSent calls every HookHalfSent.
func (hs Hooks) halfSent(ctx context.Context, msg *Message, err error, took time.Duration) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookHalfSent); ok {
			safe(hk, kindHalfSent, func() { h.OnHalfSent(ctx, msg, err, took) })
		}
	}
}

// localDone calls every HookLocalDone.
func (hs Hooks) localDone(ctx context.Context, msg *Message, state LocalState, err error, took time.Duration) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookLocalDone); ok {
			safe(hk, kindLocalDone, func() { h.OnLocalDone(ctx, msg, state, err, took) })
		}
	}
}

// checkBack calls every HookCheckBack.
func (hs Hooks) checkBack(group, txID, topic string, state LocalState, err error, took time.Duration) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookCheckBack); ok {
			safe(hk, kindCheckBack, func() { h.OnCheckBack(group, txID, topic, state, err, took) })
		}
	}
}

// held calls every HookHeld.
func (hs Hooks) held(group, txID, topic string, err error) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookHeld); ok {
			safe(hk, kindHeld, func() { h.OnHeld(group, txID, topic, err) })
		}
	}
}

// relayBatch calls every HookRelayBatch.
func (hs Hooks) relayBatch(ctx context.Context, relay, table string, size, failed int, took time.Duration) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookRelayBatch); ok {
			safe(hk, kindRelayBatch, func() { h.OnRelayBatch(ctx, relay, table, size, failed, took) })
		}
	}
}

// relayUnavailable calls every HookRelayUnavailable.
func (hs Hooks) relayUnavailable(ctx context.Context, relay, table string, rows int, err error) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookRelayUnavailable); ok {
			safe(hk, kindRelayUnavailable, func() { h.OnRelayUnavailable(ctx, relay, table, rows, err) })
		}
	}
}

// beforeHandle calls every HookBeforeHandle, threading the context.
func (hs Hooks) beforeHandle(ctx context.Context, group string, r *Received) context.Context {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookBeforeHandle); ok {
			safe(hk, kindBeforeHandle, func() {
				if c := h.BeforeHandle(ctx, group, r); c != nil {
					ctx = c
				}
			})
		}
	}
	return ctx
}

// consumed calls every HookConsumed.
func (hs Hooks) consumed(ctx context.Context, group string, r *Received, outcome Outcome, err error, took time.Duration) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookConsumed); ok {
			safe(hk, kindConsumed, func() { h.OnConsumed(ctx, group, r, outcome, err, took) })
		}
	}
}

// invalidSend calls every HookInvalidSend.
func (hs Hooks) invalidSend(ctx context.Context, msg *Message, err error) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookInvalidSend); ok {
			safe(hk, kindInvalidSend, func() { h.OnInvalidSend(ctx, msg, err) })
		}
	}
}

// reconciled calls every HookReconciled.
func (hs Hooks) reconciled(ctx context.Context, reconciler string, checked, missing, republished int, err error, took time.Duration) {
	for _, hk := range hs {
		if h, ok := inner(hk).(HookReconciled); ok {
			safe(hk, kindReconciled, func() { h.OnReconciled(ctx, reconciler, checked, missing, republished, err, took) })
		}
	}
}

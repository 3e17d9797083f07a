// Package driver is for the authors of txmsg adapters: packages that
// connect txmsg to a broker or a store, as adapters/txrmq and
// adapters/outbox do. Application code does not need it; it uses package
// txmsg, and the adapters, which call what is here. The split is the one
// between database/sql and database/sql/driver: txmsg is what a service
// calls, driver is what an adapter calls so that every adapter keeps
// txmsg's guarantees the same way.
//
// Functions that used to be methods take the value they were called on
// as their first argument: driver.Run(in, ctx, ...) for in.Run(ctx, ...).
//
// # A consumer
//
// For each message it receives, a consumer builds a [txmsg.Received]:
// Message.ID is the dedupe key (the [txmsg.PropertyID] property when the
// producer set it, else the broker's message ID, which must stay the same
// across redeliveries), Message.Topic the topic the producer sent to
// ([txmsg.PropertyTopic] when the broker moved the message), Attempt the
// delivery count starting at 1, and Message.Properties the message's
// properties except those [ReservedProperty] names. It then calls
// [Process] with the [txmsg.Route] subscribed to that topic (checked once
// with Route.Validate before subscribing), the consumer's [txmsg.Inbox]
// and its group. Process decodes, dedupes, runs the handler in the
// inbox's transaction, parks a message whose body cannot be decoded, and
// calls the inbox's HookBeforeHandle and HookConsumed hooks. A nil error
// means the message may be acknowledged; an error means the broker must
// deliver it again. Process also records each failure in the inbox's
// failing table (txmsg.FailingRow), outside the handler's transaction, and
// deletes the record when a later delivery (Attempt above 1) succeeds; a
// consumer that knows a failure will be the message's last (the broker
// dead-letters it next) sets Received.Final. A consumer must not let a
// panic escape into the broker's client: Process returns a panic of the
// handler or the codec as a [*txmsg.PanicError] (and reports that attempt
// to the hooks), and the consumer recovers what else of its own may panic
// the same way.
//
// [Run] is the inbox step alone, for code that runs its own function
// exactly once per (group, message ID) instead of a Route.
//
// # Parking
//
// A message that can never be handled is parked, not dropped and not
// retried forever: [Park] stores it, once per (group, message ID), in the
// inbox's parked table, where txmsgctl and the dashboard show it and
// Inbox.RequeueParked replays it. A consumer that retries in place
// instead of through the broker (an ordered consumer) calls [ParkFailed]
// when it gives up on a message, which also reports the message to the
// HookConsumed hooks as [txmsg.OutcomeParked]. Only after either returned
// nil may the message be acknowledged; an error means nothing was parked.
//
// # Producing
//
// A [txmsg.Transactor] runs the caller's local function through
// [CallLocal], so that a panic rolls the transaction back instead of
// crashing the process. It publishes the [txmsg.PropertyID] and
// [txmsg.PropertyTopic] properties (and [txmsg.PropertyShardingKey] for an
// ordered message) with every message; Message.Validate refuses user
// properties with those and the broker's reserved names.
//
// # Hooks
//
// A component binds the hooks of its config once, with [BindHooks], which
// refuses a hook that implements no hook interface and gives each hook
// the component's logger for its recovered panics. It then calls the
// dispatch function of each event where the event happens: [BeforeSend]
// before Message.Validate in Transact, [HalfSent] and [LocalDone] in
// transactional mode, [LocalDone] in local-table mode, [CheckBack] after
// each answered check-back, [Held] when a transaction's outcome cannot be
// known, [RelayBatch] and [RelayUnavailable] in a relay, [InvalidSend]
// when Message.Validate refused a message in Transact, [Reconciled] after
// a reconciler's pass. A consumer that
// calls [Process] or [ParkFailed] need not call [BeforeHandle] or
// [Consumed] itself: the inbox's hooks are called there. Every dispatch
// function recovers a panicking hook and goes on with the others.
package driver

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/internal/bridge"
)

// fn returns v, one of package bridge's variables, as an F. txmsg fills
// them before this package's variables are initialized, so a mismatch is
// a bug in this package, reported when the program starts.
func fn[F any](name string, v any) F {
	f, ok := v.(F)
	if !ok {
		panic(fmt.Sprintf("txmsg/driver: bridge.%s is a %T, not a %T", name, v, f))
	}
	return f
}

var (
	bindHooks        = fn[func(txmsg.Hooks, *slog.Logger) (txmsg.Hooks, error)]("BindHooks", bridge.BindHooks)
	beforeSend       = fn[func(txmsg.Hooks, context.Context, *txmsg.Message)]("BeforeSend", bridge.BeforeSend)
	halfSent         = fn[func(txmsg.Hooks, context.Context, *txmsg.Message, error, time.Duration)]("HalfSent", bridge.HalfSent)
	localDone        = fn[func(txmsg.Hooks, context.Context, *txmsg.Message, txmsg.LocalState, error, time.Duration)]("LocalDone", bridge.LocalDone)
	checkBack        = fn[func(txmsg.Hooks, string, string, string, txmsg.LocalState, error, time.Duration)]("CheckBack", bridge.CheckBack)
	held             = fn[func(txmsg.Hooks, string, string, string, error)]("Held", bridge.Held)
	relayBatch       = fn[func(txmsg.Hooks, context.Context, string, string, int, int, time.Duration)]("RelayBatch", bridge.RelayBatch)
	relayUnavailable = fn[func(txmsg.Hooks, context.Context, string, string, int, error)]("RelayUnavailable", bridge.RelayUnavailable)
	beforeHandle     = fn[func(txmsg.Hooks, context.Context, string, *txmsg.Received) context.Context]("BeforeHandle", bridge.BeforeHandle)
	consumed         = fn[func(txmsg.Hooks, context.Context, string, *txmsg.Received, txmsg.Outcome, error, time.Duration)]("Consumed", bridge.Consumed)
	invalidSend      = fn[func(txmsg.Hooks, context.Context, *txmsg.Message, error)]("InvalidSend", bridge.InvalidSend)
	reconciled       = fn[func(txmsg.Hooks, context.Context, string, int, int, int, error, time.Duration)]("Reconciled", bridge.Reconciled)
	callLocal        = fn[func(context.Context, *gorm.DB, txmsg.LocalTx) error]("CallLocal", bridge.CallLocal)
	process          = fn[func(txmsg.Route, context.Context, *txmsg.Inbox, string, *txmsg.Received) (txmsg.Outcome, error)]("Process", bridge.Process)
	run              = fn[func(*txmsg.Inbox, context.Context, string, string, string, func(context.Context, *gorm.DB) error) (txmsg.Outcome, error)]("Run", bridge.Run)
	park             = fn[func(*txmsg.Inbox, context.Context, string, *txmsg.Received, error) error]("Park", bridge.Park)
	parkFailed       = fn[func(*txmsg.Inbox, context.Context, string, *txmsg.Received, error) error]("ParkFailed", bridge.ParkFailed)
	reservedProperty = fn[func(string) bool]("ReservedProperty", bridge.ReservedProperty)
)

// BindHooks validates hs (see [txmsg.Hooks.Validate]) and returns hooks that
// log a hook's first panic of each kind of event to log (nil means
// slog.Default()). Components call it on the hooks of their config and
// dispatch to what it returns.
func BindHooks(hs txmsg.Hooks, log *slog.Logger) (txmsg.Hooks, error) {
	return bindHooks(hs, log)
}

// BeforeSend calls every [txmsg.HookBeforeSend] of hs. Transact calls it
// before it validates msg, so hooks may add properties.
func BeforeSend(hs txmsg.Hooks, ctx context.Context, msg *txmsg.Message) {
	beforeSend(hs, ctx, msg)
}

// HalfSent calls every [txmsg.HookHalfSent] of hs.
func HalfSent(hs txmsg.Hooks, ctx context.Context, msg *txmsg.Message, err error, took time.Duration) {
	halfSent(hs, ctx, msg, err, took)
}

// LocalDone calls every [txmsg.HookLocalDone] of hs.
func LocalDone(hs txmsg.Hooks, ctx context.Context, msg *txmsg.Message, state txmsg.LocalState, err error, took time.Duration) {
	localDone(hs, ctx, msg, state, err, took)
}

// CheckBack calls every [txmsg.HookCheckBack] of hs; group is the
// producer group that answered.
func CheckBack(hs txmsg.Hooks, group, txID, topic string, state txmsg.LocalState, err error, took time.Duration) {
	checkBack(hs, group, txID, topic, state, err, took)
}

// Held calls every [txmsg.HookHeld] of hs; group is the sweeper's
// consumer group.
func Held(hs txmsg.Hooks, group, txID, topic string, err error) {
	held(hs, group, txID, topic, err)
}

// RelayBatch calls every [txmsg.HookRelayBatch] of hs; relay is the
// relay's name, table its outbox table.
func RelayBatch(hs txmsg.Hooks, ctx context.Context, relay, table string, size, failed int, took time.Duration) {
	relayBatch(hs, ctx, relay, table, size, failed, took)
}

// RelayUnavailable calls every [txmsg.HookRelayUnavailable] of hs.
func RelayUnavailable(hs txmsg.Hooks, ctx context.Context, relay, table string, rows int, err error) {
	relayUnavailable(hs, ctx, relay, table, rows, err)
}

// InvalidSend calls every [txmsg.HookInvalidSend] of hs. Transact calls it
// when Message.Validate refused msg, with that error.
func InvalidSend(hs txmsg.Hooks, ctx context.Context, msg *txmsg.Message, err error) {
	invalidSend(hs, ctx, msg, err)
}

// Reconciled calls every [txmsg.HookReconciled] of hs after a
// reconciler's pass over a window.
func Reconciled(hs txmsg.Hooks, ctx context.Context, reconciler string, checked, missing, republished int, err error, took time.Duration) {
	reconciled(hs, ctx, reconciler, checked, missing, republished, err, took)
}

// BeforeHandle calls every [txmsg.HookBeforeHandle] of hs, threading the
// context, and returns the handler's context.
func BeforeHandle(hs txmsg.Hooks, ctx context.Context, group string, r *txmsg.Received) context.Context {
	return beforeHandle(hs, ctx, group, r)
}

// Consumed calls every [txmsg.HookConsumed] of hs.
func Consumed(hs txmsg.Hooks, ctx context.Context, group string, r *txmsg.Received, outcome txmsg.Outcome, err error, took time.Duration) {
	consumed(hs, ctx, group, r, outcome, err, took)
}

// CallLocal runs local with tx, turning a panic into a [*txmsg.PanicError].
// Transactors use it so a panicking LocalTx rolls back instead of crashing
// the process.
func CallLocal(ctx context.Context, tx *gorm.DB, local txmsg.LocalTx) error {
	return callLocal(ctx, tx, local)
}

// Process handles rec, received for group, with route r: decode, dedupe
// through in, run the handler. A body that cannot be decoded is parked.
// The inbox's HookBeforeHandle and HookConsumed hooks are called around
// it. A nil error means the message may be acknowledged (it was handled,
// was a duplicate, or was parked); an error means the broker should
// deliver it again. A failure, unless ctx is done, is recorded in in's
// failing table, and a later delivery (Attempt above 1) that succeeds
// deletes the record; neither write can fail Process.
func Process(r txmsg.Route, ctx context.Context, in *txmsg.Inbox, group string, rec *txmsg.Received) (txmsg.Outcome, error) {
	return process(r, ctx, in, group, rec)
}

// Run runs fn in a transaction whose first statement records (group, key)
// in in's inbox table; topic is stored with it. When that pair is already
// recorded, fn does not run and the outcome is [txmsg.OutcomeDuplicate].
// When fn fails or panics, everything rolls back and the error is returned
// (a panic as [*txmsg.PanicError]). It calls no hooks.
func Run(in *txmsg.Inbox, ctx context.Context, group, topic, key string, fn func(ctx context.Context, tx *gorm.DB) error) (txmsg.Outcome, error) {
	return run(in, ctx, group, topic, key, fn)
}

// Park stores r in in's parked table with cause, once per (group, message
// ID); a second Park of the same message stores nothing more. It calls no
// hooks. An error means nothing was parked and the message must not be
// acknowledged.
func Park(in *txmsg.Inbox, ctx context.Context, group string, r *txmsg.Received, cause error) error {
	return park(in, ctx, group, r, cause)
}

// ParkFailed parks r in in's parked table after its handler failed for the
// last time, with cause (the handler's last error), and reports it to the
// inbox's HookConsumed hooks with [txmsg.OutcomeParked]. Consumers that
// retry in place instead of through the broker (ordered consumers) use it
// when they give up on a message, so that it is kept, visible and
// replayable like an undecodable one, and the queue behind it can go on.
//
// A second ParkFailed of the same (group, message ID) stores nothing more
// (the hooks see it again). It deletes the message's row of the failing
// table. An error means nothing was parked and the message must not be
// skipped.
func ParkFailed(in *txmsg.Inbox, ctx context.Context, group string, r *txmsg.Received, cause error) error {
	return parkFailed(in, ctx, group, r, cause)
}

// ReservedProperty reports whether name is a property the broker protocol
// or txmsg sets itself. Message.Validate refuses it in user properties; a
// consumer leaves it out of Message.Properties when it builds a
// [txmsg.Received].
func ReservedProperty(name string) bool {
	return reservedProperty(name)
}

package txmsg

import "github.com/txmsg/txmsg/txmsg/internal/bridge"

// Package driver, for broker adapters, reaches these functions through
// package bridge; see its documentation. A package-level initializer
// rather than init(), which this repository keeps out of non-test files.
var _ = exportToDriver()

func exportToDriver() struct{} {
	bridge.BindHooks = Hooks.bind
	bridge.BeforeSend = Hooks.beforeSend
	bridge.HalfSent = Hooks.halfSent
	bridge.LocalDone = Hooks.localDone
	bridge.CheckBack = Hooks.checkBack
	bridge.Held = Hooks.held
	bridge.RelayBatch = Hooks.relayBatch
	bridge.RelayUnavailable = Hooks.relayUnavailable
	bridge.BeforeHandle = Hooks.beforeHandle
	bridge.Consumed = Hooks.consumed
	bridge.InvalidSend = Hooks.invalidSend
	bridge.Reconciled = Hooks.reconciled
	bridge.CallLocal = callLocal
	bridge.Process = Route.handle
	bridge.Run = (*Inbox).run
	bridge.Park = (*Inbox).park
	bridge.ParkFailed = (*Inbox).parkFailed
	bridge.ReservedProperty = reservedProperty
	return struct{}{}
}

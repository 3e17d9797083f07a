// Package bridge hands package txmsg's adapter-only functions to package
// txmsg/driver without exporting them from txmsg.
//
// Package txmsg stores each function in a variable here while its package
// variables are initialized. Package driver imports txmsg, so Go
// initializes txmsg, and fills these variables, before driver's own
// variables, which read them back with their concrete types. The
// variables are typed any because this package cannot name txmsg's types:
// txmsg imports it.
package bridge

// Functions of package txmsg, each a method expression or function value
// whose concrete type package driver asserts.
var (
	// BindHooks is Hooks.bind.
	BindHooks any
	// BeforeSend, HalfSent, LocalDone, CheckBack, Held, RelayBatch,
	// RelayUnavailable, BeforeHandle, Consumed, InvalidSend and Reconciled
	// are the dispatch methods of Hooks.
	BeforeSend, HalfSent, LocalDone, CheckBack, Held, RelayBatch, RelayUnavailable, BeforeHandle, Consumed, InvalidSend, Reconciled any
	// CallLocal runs a LocalTx, turning a panic into a *PanicError.
	CallLocal any
	// Process is Route.handle.
	Process any
	// Run, Park and ParkFailed are the Inbox's.
	Run, Park, ParkFailed any
	// ReservedProperty reports whether a property name is reserved.
	ReservedProperty any
)

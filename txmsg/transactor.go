package txmsg

import (
	"context"

	"gorm.io/gorm"
)

// LocalTx is the caller's business work. It runs inside the database
// transaction that also records the message, so its writes and the event
// commit or roll back together. Returning an error, or panicking, rolls
// the transaction back and nothing is published.
type LocalTx func(ctx context.Context, tx *gorm.DB) error

// Transactor publishes a message if and only if the local transaction
// commits. Both delivery modes implement it, so a service switches mode by
// wiring a different Transactor.
//
// Transact validates msg first (see [Message.Validate]); a bad message or a
// nil local is an error and nothing is sent or written. When msg.ID is
// empty, Transact assigns a new ID to it.
//
// On success the returned Receipt's State is [StateCommitted]. On failure
// the error says why; a non-nil Receipt alongside it carries the ID and the
// state reached ([StateRolledBack], or [StateUnknown] with
// [ErrOutcomeUnknown]).
//
// Transact begins its own database transaction. Called inside a
// transaction the caller holds, it runs on a second connection: its work
// is not atomic with the outer transaction, and with a one-connection pool
// it deadlocks. Do the business writes in local instead; see the package
// documentation.
type Transactor interface {
	Transact(ctx context.Context, msg *Message, local LocalTx) (*Receipt, error)
}

// LocalState is the outcome of a local transaction as txmsg knows it.
type LocalState int

const (
	// StateUnknown means the outcome is not known yet: the barrier decides
	// later.
	StateUnknown LocalState = iota
	// StateCommitted means the local transaction committed; the event is or
	// will be published.
	StateCommitted
	// StateRolledBack means the local transaction rolled back; the event is
	// never published.
	StateRolledBack
)

// String returns "unknown", "committed" or "rolled_back".
func (s LocalState) String() string {
	switch s {
	case StateCommitted:
		return "committed"
	case StateRolledBack:
		return "rolled_back"
	default:
		return "unknown"
	}
}

// Receipt describes what Transact did.
type Receipt struct {
	// ID is the message's txmsg ID.
	ID string
	// BrokerMessageID is the broker's ID for the message, when the mode
	// knows it at commit time (transactional mode). Local-table mode leaves
	// it empty: the relay publishes later.
	BrokerMessageID string
	// State is the local transaction's outcome.
	State LocalState
}

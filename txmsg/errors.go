package txmsg

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidMessage means a message broke a rule checked before any
	// network call or database write; nothing was sent or written.
	ErrInvalidMessage = errors.New("txmsg: invalid message")
	// ErrInvalidTopic means the topic name breaks RocketMQ's rules or names
	// a system topic. It comes wrapped together with ErrInvalidMessage.
	ErrInvalidTopic = errors.New("txmsg: invalid topic")
	// ErrBodyTooLarge means the body exceeds the configured maximum size.
	// It comes wrapped together with ErrInvalidMessage.
	ErrBodyTooLarge = errors.New("txmsg: body too large")
	// ErrNilLocalTx means Transact was called without a local transaction.
	ErrNilLocalTx = errors.New("txmsg: local transaction is nil")
	// ErrInvalidConfig means a constructor was given a config it cannot
	// work with; the message says which field.
	ErrInvalidConfig = errors.New("txmsg: invalid config")
	// ErrRolledBackByCheck means the broker's check-back asked about this
	// transaction before the local transaction recorded its barrier, and the
	// checker answered ROLLBACK. The local transaction did not commit and the
	// event was not published. Retrying with a new message is safe.
	ErrRolledBackByCheck = errors.New("txmsg: rolled back by the broker's check-back before the local transaction began")
	// ErrDuplicateID means a message with the same txmsg ID was already
	// committed; IDs must be unique.
	ErrDuplicateID = errors.New("txmsg: duplicate message ID")
	// ErrOutcomeUnknown means whether the message's transaction committed
	// is unknown: the local transaction's COMMIT was sent but its result was
	// lost (for example the connection dropped), or, in transactional mode,
	// the ID's barrier row already existed (an earlier transaction with
	// this ID committed, or a check-back rolled it back) and reading it
	// failed. The barrier row decides: the event is published if and only
	// if a transaction with this ID committed. The caller should look the
	// business row up rather than retry blindly.
	ErrOutcomeUnknown = errors.New("txmsg: outcome of the local commit is unknown; the barrier decides")
	// ErrNotStarted means a component was used before its Start returned
	// (for a relay: while its Run is not running); nothing was sent or
	// written.
	ErrNotStarted = errors.New("txmsg: not started")
	// ErrClosed means the component was closed; nothing was sent or
	// written.
	ErrClosed = errors.New("txmsg: closed")
	// ErrPurgeTooYoung means [Inbox.Purge] was asked to delete rows whose
	// messages the broker may still redeliver (younger than
	// [MinInboxPurgeAge]); nothing was deleted.
	ErrPurgeTooYoung = errors.New("txmsg: purge age is inside the broker's redelivery span")
	// ErrDecode means a message body could not be decoded into the
	// handler's type. Consumers park such messages instead of retrying.
	ErrDecode = errors.New("txmsg: cannot decode message body")
	// ErrTopicNotFound means a name server answered that it has no route
	// for a topic: the topic has not been created on any broker. The
	// message names the topic and the command that creates it (txmsgctl
	// topic create). A name server that does not answer is
	// [ErrUnavailable] instead.
	ErrTopicNotFound = errors.New("txmsg: topic not found")
)

// PanicError is returned when a local transaction or a handler panicked.
// The transaction was rolled back.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string {
	return fmt.Sprintf("txmsg: panic: %v", e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// BatchError reports a partial failure of [Publisher.Publish]: Errs has one
// entry per message, nil for those that were published.
type BatchError struct {
	Errs []error
}

// Error implements error.
func (e *BatchError) Error() string {
	failed := 0
	var first error
	for _, err := range e.Errs {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	return fmt.Sprintf("txmsg: %d of %d messages not published: %v", failed, len(e.Errs), first)
}

// Unwrap returns the individual errors.
func (e *BatchError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

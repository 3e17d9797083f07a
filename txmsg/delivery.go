package txmsg

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// Received is a message as a consumer received it from the broker, before
// decoding: what [HookBeforeHandle] and [HookConsumed] hooks see of it.
// Consumers build one per delivery (see package
// [github.com/txmsg/txmsg/txmsg/driver]).
type Received struct {
	// Message is the envelope. Message.ID is the dedupe key: the txmsg ID
	// when the producer set one, otherwise the broker's message ID.
	Message *Message
	// BrokerMessageID is the broker's ID for the message.
	BrokerMessageID string
	// Attempt counts deliveries of this message to this consumer group,
	// starting at 1.
	Attempt int
	// BornAt is when the producer created the message, if the broker says.
	BornAt time.Time
	// Final is set by a consumer when a failure of this delivery is the
	// last: the broker does not deliver the message to the group again
	// but moves it to the group's dead-letter topic. The inbox marks its
	// failing row so (FailingRow.DeadLettered).
	Final bool
	// DueAt is when a delayed message was due (see [WithDelay]); zero for
	// a message sent without a delay.
	DueAt time.Time
	// ReceivedAt is when the consumer started processing the message,
	// after any wait in its buffer.
	ReceivedAt time.Time
}

// Lateness is how long after its due time a delayed message reached the
// consumer, ReceivedAt - DueAt; 0 for a message without a due time.
func (r *Received) Lateness() time.Duration {
	if r.DueAt.IsZero() || r.ReceivedAt.IsZero() {
		return 0
	}
	return r.ReceivedAt.Sub(r.DueAt)
}

// Delivery is one typed event handed to a [Handler].
type Delivery[T any] struct {
	// Event is the decoded body.
	Event T
	// Message is the envelope: txmsg ID, topic, tag, keys, properties and
	// the raw body.
	Message *Message
	// BrokerMessageID is the broker's ID for the message.
	BrokerMessageID string
	// Group is the consumer group handling it.
	Group string
	// Attempt counts deliveries of this message to Group, starting at 1: a
	// handler that failed twice sees Attempt == 3 on its third run.
	Attempt int
	// DueAt is when the event was due, for an event sent with [WithDelay]
	// or [WithDeliverAt]; zero otherwise. It reached the consumer at
	// ReceivedAt, never before DueAt by the sending side's clock (the
	// database's in local-table mode, the producer's in transactional
	// mode).
	DueAt time.Time
	// ReceivedAt is when the consumer started processing the message,
	// after any wait in its buffer since the pull.
	ReceivedAt time.Time
}

// Handler handles one event inside the database transaction that also
// records it in the inbox. Its writes through tx commit if and only if it
// returns nil, and then the event is never handled again by the same
// group. Returning an error, or panicking, rolls back and asks the broker to
// deliver the message again later.
type Handler[T any] func(ctx context.Context, tx *gorm.DB, d Delivery[T]) error

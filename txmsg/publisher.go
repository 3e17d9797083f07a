package txmsg

import (
	"context"
	"errors"
	"net"
)

// Publisher sends messages to a broker right away, with no transaction. The
// local-table mode's relay publishes through it.
//
// Publish sends msgs, which may have different topics, and returns nil when
// all were acknowledged by the broker. When some failed it returns a
// [*BatchError] with one entry per message; any other error means none was
// published. Messages keep their IDs, so a retry after an unclear failure
// causes at most a duplicate, which consumers drop.
//
// Errors should say whether the broker was unavailable or refused a
// message, by wrapping [ErrUnavailable] or [ErrRejected]: the outbox relay
// counts only rejections toward a row's attempts.
type Publisher interface {
	Publish(ctx context.Context, msgs ...*Message) error
}

// GroupPublisher is implemented by a [Publisher] that can deliver a
// message to one consumer group alone, not to every group subscribed to
// its topic. [Inbox.RequeueParked] needs one: a parked message replayed
// to its topic would reach every group, and a group whose inbox no longer
// holds the message (its rows purged) would apply it a second time.
//
// PublishToGroup sends msg, with its txmsg ID and topic, so that only
// consumers of group receive it, as msg.Topic. Errors wrap
// [ErrUnavailable] or [ErrRejected] as Publish's do; a group the broker
// does not know is rejected.
//
// [txrmq.Publisher] implements it through the group's retry topic
// (%RETRY%<group>), which every consumer of the group reads.
//
// [txrmq.Publisher]: https://pkg.go.dev/github.com/txmsg/txmsg/adapters/txrmq#Publisher
type GroupPublisher interface {
	Publisher
	PublishToGroup(ctx context.Context, group string, msg *Message) error
}

// BrokerReturnNotifier is implemented by a [Publisher] that watches the
// brokers it sends to and can tell when one that did not accept
// connections accepts them again. The outbox relay uses it to retry the
// rows that wait for the broker at once instead of at their next attempt;
// a Publisher that does not implement it loses nothing but that.
//
// NotifyBrokerReturn returns a channel that receives a value when a broker
// that was unreachable accepts connections again, and again at each later
// moment the publisher expects the returning broker to take messages (for
// [txrmq.Publisher]: after each of the route refreshes that follow a
// broker's return while it starts up), and a function that ends the
// subscription. The channel is buffered by one, so signals that find one
// pending coalesce, and it is never closed. A signal is a hint that a
// publish may go through now, not a promise. Each call makes a
// subscription of its own, so several relays can share one Publisher;
// call stop once when done.
//
// [txrmq.Publisher]: https://pkg.go.dev/github.com/txmsg/txmsg/adapters/txrmq#Publisher
type BrokerReturnNotifier interface {
	NotifyBrokerReturn() (returned <-chan struct{}, stop func())
}

// Publish failures come in two kinds, and a Publisher says which by
// wrapping one of these errors, so that a caller retrying on its own (the
// outbox relay) can tell a message that will never go through from a
// broker that is away for now.
var (
	// ErrUnavailable marks a failure of the broker or of the route to it,
	// not of the message: connection refused, no route to the topic, a
	// timeout, a name server that does not answer, a broker that is busy,
	// flushing or not writable. The same message goes through once the
	// broker is back; retrying it forever is right.
	ErrUnavailable = errors.New("txmsg: broker unavailable")
	// ErrRejected marks a failure of one message: the broker answered and
	// refused that message (too large, an illegal property, a topic it
	// forbids). Sending it again gets the same answer.
	ErrRejected = errors.New("txmsg: message rejected by the broker")
)

// IsUnavailable reports whether a publish error is a failure of the broker
// or the route rather than of the message: it wraps [ErrUnavailable], a
// context deadline, or a network error, and wraps neither [ErrRejected]
// nor [ErrInvalidMessage]. A rejection wins when an error wraps both.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, ErrRejected) || errors.Is(err, ErrInvalidMessage) {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

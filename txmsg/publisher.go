package txmsg

import "context"

// Publisher sends messages to a broker right away, with no transaction. The
// local-table mode's relay publishes through it.
//
// Publish sends msgs, which may have different topics, and returns nil when
// all were acknowledged by the broker. When some failed it returns a
// [*BatchError] with one entry per message; any other error means none was
// published. Messages keep their IDs, so a retry after an unclear failure
// causes at most a duplicate, which consumers drop.
type Publisher interface {
	Publish(ctx context.Context, msgs ...*Message) error
}

package txmsg

import (
	"context"
	"fmt"
	"time"
)

// Topic names a topic and the event type published on it.
type Topic[T any] struct {
	// Name is the broker topic. Required; checked by [ValidateTopic].
	Name string
	// Tag is the default tag of messages sent to this topic; empty means
	// none. [WithTag] overrides it per message.
	Tag string
	// Codec encodes events. Nil means [JSONCodec].
	Codec Codec[T]
}

func (t Topic[T]) codec() Codec[T] {
	if t.Codec == nil {
		return JSONCodec[T]{}
	}
	return t.Codec
}

// Producer sends typed events through a [Transactor]. It is safe for
// concurrent use.
type Producer[T any] struct {
	tr    Transactor
	topic Topic[T]
	codec Codec[T]
}

// NewProducer returns a Producer for topic that sends through tr. It fails
// with [ErrInvalidConfig] when tr is nil or the topic name is invalid.
func NewProducer[T any](tr Transactor, topic Topic[T]) (*Producer[T], error) {
	if tr == nil {
		return nil, fmt.Errorf("%w: Transactor is nil", ErrInvalidConfig)
	}
	if err := ValidateTopic(topic.Name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Producer[T]{tr: tr, topic: topic, codec: topic.codec()}, nil
}

// Topic returns the producer's topic.
func (p *Producer[T]) Topic() Topic[T] { return p.topic }

// Send encodes event and publishes it if and only if local commits. See
// [Transactor] for the meaning of the results.
func (p *Producer[T]) Send(ctx context.Context, event T, local LocalTx, opts ...SendOption) (*Receipt, error) {
	msg, err := p.Message(event, opts...)
	if err != nil {
		return nil, err
	}
	return p.tr.Transact(ctx, msg, local)
}

// Message builds the envelope Send would publish for event, without sending
// it. An option given an invalid value (such as WithDelay(0)) fails here,
// with [ErrInvalidMessage]. Outbox users pass it to EnqueueTx inside a transaction they already
// hold.
func (p *Producer[T]) Message(event T, opts ...SendOption) (*Message, error) {
	body, err := p.codec.Encode(event)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	msg := &Message{Topic: p.topic.Name, Tag: p.topic.Tag, Body: body}
	for _, opt := range opts {
		opt(msg)
	}
	if msg.invalid != nil {
		return nil, msg.invalid
	}
	return msg, nil
}

// SendOption changes one message built by [Producer.Send].
type SendOption func(*Message)

// WithID sets the txmsg ID instead of generating one. The caller promises
// uniqueness; a repeated ID fails with [ErrDuplicateID] or is dropped by
// consumers as a duplicate.
func WithID(id string) SendOption { return func(m *Message) { m.ID = id } }

// WithKeys adds message keys, searchable in the broker's console.
func WithKeys(keys ...string) SendOption {
	return func(m *Message) { m.Keys = append(m.Keys, keys...) }
}

// WithTag sets the message tag, overriding [Topic.Tag].
func WithTag(tag string) SendOption { return func(m *Message) { m.Tag = tag } }

// WithShardingKey routes the message to the queue chosen by key: every
// event with the same key goes to the same queue.
//
// Order per key depends on the mode and the consumer (see
// docs/design-ordering.md). In local-table mode with RelayConfig.Ordered,
// the broker stores a key's events in commit order, and
// txrmq.OrderedConsumer handles them in that order; the concurrent
// txrmq.Consumer does not keep it. In transactional mode the broker stores
// a key's events in the order their END_TRANSACTION (or check-back)
// commits them, which is not commit order when transactions of a key
// overlap, when a producer dies or its one-way END_TRANSACTION is lost,
// and, rarely, even when one producer sends them one after another.
func WithShardingKey(key string) SendOption { return func(m *Message) { m.ShardingKey = key } }

// WithProperty sets a user property.
func WithProperty(name, value string) SendOption {
	return func(m *Message) {
		if m.Properties == nil {
			m.Properties = map[string]string{}
		}
		m.Properties[name] = value
	}
}

// WithDelay asks for the event to reach consumers no earlier than d after
// it is written, and only if the transaction commits. d must be positive
// and at most [MaxDelay] (3 days); anything else fails the send with
// [ErrInvalidMessage] before anything is written.
//
// Both modes honour it, on RocketMQ 4.x and 5.x brokers alike: in
// local-table mode the outbox row waits until it is due, by the
// database's clock, and the relay publishes it then; in transactional mode
// the half message goes to the transactor's delay topic and a forwarder
// (txrmq.Forwarder) sends it on to its topic when it is due. Events arrive
// a second or two late at most while relay, forwarder and broker run.
// Consumers see the due time as [Delivery.DueAt].
func WithDelay(d time.Duration) SendOption {
	return func(m *Message) {
		if d <= 0 {
			m.invalid = fmt.Errorf("%w: WithDelay(%v): the delay must be positive (at most %v); send without it to deliver at once", ErrInvalidMessage, d, MaxDelay)
			return
		}
		m.Delay, m.DeliverAt = d, time.Time{}
	}
}

// WithDeliverAt asks for the event to reach consumers no earlier than t,
// and only if the transaction commits. t must lie in the future, at most
// [MaxDelay] ahead, when the send starts; otherwise the send fails with
// [ErrInvalidMessage] before anything is written. See [WithDelay].
func WithDeliverAt(t time.Time) SendOption {
	return func(m *Message) {
		if t.IsZero() {
			m.invalid = fmt.Errorf("%w: WithDeliverAt: the time is zero; send without it to deliver at once", ErrInvalidMessage)
			return
		}
		m.DeliverAt, m.Delay = t, 0
	}
}

package txmsg

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Property names txmsg sets on every message it publishes. They travel as
// broker user properties, so consumers written without txmsg can read them.
const (
	// PropertyID carries the txmsg ID: the barrier key, the outbox key and
	// the consumer's dedupe key.
	PropertyID = "TXMSG_ID"
	// PropertyShardingKey carries the sharding key of an ordered message.
	PropertyShardingKey = "TXMSG_SHARDING_KEY"
	// PropertyTopic carries the destination topic. The broker rewrites its
	// own REAL_TOPIC property when it moves a message between system
	// topics; this one survives, so a half message found in a system topic
	// can still be sent where it belongs.
	PropertyTopic = "TXMSG_TOPIC"
	// PropertyDeliverAt carries a delayed message's due time, in Unix
	// milliseconds: the earliest time it reaches consumers (see
	// [WithDelay]). Consumers read it as [Delivery.DueAt].
	PropertyDeliverAt = "TXMSG_DELIVER_AT"
)

// MaxDelay is the longest delay [WithDelay] and [WithDeliverAt] accept:
// 3 days, the timer horizon of a RocketMQ 5.x broker with its default
// timerMaxDelaySec (259200). It holds in both modes, so that moving a
// producer between local-table and transactional mode, or between broker
// lines, never changes which delays are accepted. (On a 4.x broker the
// transactional mode reaches it by chaining the broker's delay levels, the
// largest of which is 2 h.)
const MaxDelay = 72 * time.Hour

// DefaultMaxBodySize is the largest body a message may carry unless a
// component's config says otherwise: RocketMQ's default maxMessageSize of
// 4 MiB.
const DefaultMaxBodySize = 4 * 1024 * 1024

// Limits from RocketMQ's topic and property rules.
const (
	maxTopicLength = 127
	maxTagLength   = 255
	maxKeyLength   = 255
)

var topicPattern = regexp.MustCompile(`^[%|a-zA-Z0-9_-]+$`)

// reservedTopics are the broker's own topics that applications must not
// publish to.
var reservedTopics = map[string]bool{
	"TBW102":              true,
	"SCHEDULE_TOPIC_XXXX": true,
	"BenchmarkTest":       true,
	"OFFSET_MOVED_EVENT":  true,
	"SELF_TEST_TOPIC":     true,
	"RMQ_SYS_TRACE_TOPIC": true,
}

// reservedProperties are property names the RocketMQ protocol uses itself; a
// user property with one of these names would corrupt the message.
var reservedProperties = map[string]bool{
	"KEYS": true, "TAGS": true, "WAIT": true, "DELAY": true, "RETRY_TOPIC": true,
	"REAL_TOPIC": true, "REAL_QID": true, "TRAN_MSG": true, "PGROUP": true,
	"MIN_OFFSET": true, "MAX_OFFSET": true, "BUYER_ID": true, "ORIGIN_MESSAGE_ID": true,
	"TRANSFER_FLAG": true, "CORRECTION_FLAG": true, "MQ2_FLAG": true, "RECONSUME_TIME": true,
	"MSG_REGION": true, "TRACE_ON": true, "UNIQ_KEY": true, "MAX_RECONSUME_TIMES": true,
	"CONSUME_START_TIME": true, "TRAN_PREPARED_QUEUE_OFFSET": true, "TRANSACTION_CHECK_TIMES": true,
	"CHECK_IMMUNITY_TIME_IN_SECONDS": true, "SHARDING_KEY": true, "__transactionId__": true,
	"INSTANCE_ID": true, "CORRELATION_ID": true, "REPLY_TO_CLIENT": true, "TTL": true,
	"ARRIVE_TIME": true, "CLUSTER": true, "MSG_TYPE": true, "TIMER_DELIVER_MS": true,
	"TIMER_DELAY_SEC": true, "TIMER_DELAY_MS": true, "TRACE_CONTEXT": true, "MSG_REGION_ID": true,
}

// Message is the envelope txmsg stores and publishes. Transactor
// implementations fill ID when it is empty; every other field is the
// caller's.
type Message struct {
	// ID is the txmsg ID, time-ordered and unique (see [NewID]). Empty means
	// "assign one"; a caller that sets it promises it is unique.
	ID string
	// Topic is the destination topic. Required.
	Topic string
	// Tag is the optional RocketMQ tag consumers can filter on.
	Tag string
	// Keys are extra message keys for the broker's key index. The txmsg ID
	// is always added as a key as well.
	Keys []string
	// ShardingKey, when set, routes every message with the same key to the
	// same queue. Which order they keep there depends on the mode (see
	// WithShardingKey).
	ShardingKey string
	// Body is the payload. It may be empty but must not exceed the
	// configured maximum size.
	Body []byte
	// Properties are user properties carried with the message.
	Properties map[string]string
	// Delay, when positive, asks for the message to reach consumers no
	// earlier than this long after it is written: after the outbox row is
	// inserted (by the database's clock) in local-table mode, after the
	// transaction begins (by the producer's clock) in transactional mode.
	// At most one of Delay and DeliverAt may be set; see [WithDelay].
	Delay time.Duration
	// DeliverAt, when not zero, is the earliest time the message may reach
	// consumers (see [WithDeliverAt]). A [Publisher] sends at once and
	// carries DeliverAt to consumers as the due time
	// ([PropertyDeliverAt]); relays publish delayed rows that way when
	// they are due.
	DeliverAt time.Time

	// invalid is an error a SendOption found in its argument; Validate
	// returns it.
	invalid error
}

// Clone returns a deep copy of m.
func (m *Message) Clone() *Message {
	c := *m
	c.Keys = append([]string(nil), m.Keys...)
	c.Body = append([]byte(nil), m.Body...)
	if m.Properties != nil {
		c.Properties = make(map[string]string, len(m.Properties))
		for k, v := range m.Properties {
			c.Properties[k] = v
		}
	}
	return &c
}

// Validate checks m against the broker's rules before anything is sent or
// written. maxBody is the largest allowed body; 0 means
// [DefaultMaxBodySize]. The returned error wraps [ErrInvalidMessage], and
// also [ErrInvalidTopic] or [ErrBodyTooLarge] where those apply.
func (m *Message) Validate(maxBody int) error {
	if m == nil {
		return fmt.Errorf("%w: message is nil", ErrInvalidMessage)
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBodySize
	}
	if err := ValidateTopic(m.Topic); err != nil {
		return err
	}
	if len(m.Body) == 0 {
		// The broker refuses a message without a body; refusing it here
		// keeps it out of the outbox and the half-message path.
		return fmt.Errorf("%w: body is empty; RocketMQ does not accept empty messages", ErrInvalidMessage)
	}
	if len(m.Body) > maxBody {
		return fmt.Errorf("%w: %w: %d bytes, the limit is %d", ErrInvalidMessage, ErrBodyTooLarge, len(m.Body), maxBody)
	}
	if len(m.Tag) > maxTagLength || strings.Contains(m.Tag, "||") || strings.ContainsAny(m.Tag, "\x01\x02") {
		return fmt.Errorf("%w: tag %q must be at most %d bytes and must not contain \"||\"", ErrInvalidMessage, m.Tag, maxTagLength)
	}
	if m.ID != "" && (len(m.ID) > maxKeyLength || strings.ContainsAny(m.ID, " \x01\x02")) {
		return fmt.Errorf("%w: ID %q must be at most %d bytes without spaces", ErrInvalidMessage, m.ID, maxKeyLength)
	}
	for _, k := range m.Keys {
		if k == "" || len(k) > maxKeyLength || strings.ContainsAny(k, " \x01\x02") {
			return fmt.Errorf("%w: key %q must be 1 to %d bytes without spaces", ErrInvalidMessage, k, maxKeyLength)
		}
	}
	if strings.ContainsAny(m.ShardingKey, "\x01\x02") || len(m.ShardingKey) > maxKeyLength {
		return fmt.Errorf("%w: sharding key must be at most %d bytes of printable text", ErrInvalidMessage, maxKeyLength)
	}
	if m.invalid != nil {
		return m.invalid
	}
	if m.Delay < 0 {
		return fmt.Errorf("%w: delay %v is negative; use a positive delay up to %v", ErrInvalidMessage, m.Delay, MaxDelay)
	}
	if m.Delay > 0 && !m.DeliverAt.IsZero() {
		return fmt.Errorf("%w: both a delay (%v) and a delivery time (%v) are set; use one of WithDelay and WithDeliverAt", ErrInvalidMessage, m.Delay, m.DeliverAt)
	}
	for k, v := range m.Properties {
		if k == "" || strings.ContainsAny(k, "\x01\x02") || strings.ContainsAny(v, "\x01\x02") {
			return fmt.Errorf("%w: property %q: names must be non-empty and names and values must not contain \\x01 or \\x02", ErrInvalidMessage, k)
		}
		if reservedProperty(k) {
			return fmt.Errorf("%w: property %q is reserved by the broker or by txmsg", ErrInvalidMessage, k)
		}
	}
	return nil
}

// Due returns when a message written at now may reach consumers, and
// whether it is delayed at all: now+Delay, or DeliverAt. Transactors call
// it before they write anything: a delay above [MaxDelay], or a DeliverAt
// not after now or more than MaxDelay after it, fails with an error
// wrapping [ErrInvalidMessage]. Call it after [Message.Validate].
func (m *Message) Due(now time.Time) (due time.Time, delayed bool, err error) {
	switch {
	case m.Delay > MaxDelay:
		return time.Time{}, false, fmt.Errorf("%w: delay %v is longer than txmsg.MaxDelay (%v), the broker's timer horizon; deliver later events from a scheduler of your own", ErrInvalidMessage, m.Delay, MaxDelay)
	case m.Delay > 0:
		return now.Add(m.Delay), true, nil
	case m.DeliverAt.IsZero():
		return time.Time{}, false, nil
	case !m.DeliverAt.After(now):
		return time.Time{}, false, fmt.Errorf("%w: delivery time %s is not in the future (now %s); send without WithDeliverAt to deliver at once", ErrInvalidMessage, m.DeliverAt.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	case m.DeliverAt.Sub(now) > MaxDelay:
		return time.Time{}, false, fmt.Errorf("%w: delivery time %s is more than txmsg.MaxDelay (%v) away, the broker's timer horizon; deliver later events from a scheduler of your own", ErrInvalidMessage, m.DeliverAt.UTC().Format(time.RFC3339Nano), MaxDelay)
	}
	return m.DeliverAt, true, nil
}

// FormatDeliverAt formats t as [PropertyDeliverAt] carries it: Unix
// milliseconds, rounded up so that a message is never due early.
func FormatDeliverAt(t time.Time) string {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return strconv.FormatInt(ms, 10)
}

// ParseDeliverAt reads a [PropertyDeliverAt] value; ok is false when v is
// empty or not a number.
func ParseDeliverAt(v string) (t time.Time, ok bool) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if v == "" || err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// ValidateTopic reports whether name is a topic applications may publish to
// under RocketMQ's rules: 1 to 127 characters from [a-zA-Z0-9_-%|], and not
// one of the broker's system topics. The error wraps [ErrInvalidTopic] and
// [ErrInvalidMessage].
func ValidateTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %w: topic is empty", ErrInvalidMessage, ErrInvalidTopic)
	case len(name) > maxTopicLength:
		return fmt.Errorf("%w: %w: topic %q is longer than %d characters", ErrInvalidMessage, ErrInvalidTopic, name, maxTopicLength)
	case !topicPattern.MatchString(name):
		return fmt.Errorf("%w: %w: topic %q may only contain letters, digits, '_', '-', '%%' and '|'", ErrInvalidMessage, ErrInvalidTopic, name)
	case reservedTopics[name] || strings.HasPrefix(name, "RMQ_SYS_") || strings.HasPrefix(name, "rmq_sys_") ||
		strings.HasPrefix(name, "%RETRY%") || strings.HasPrefix(name, "%DLQ%") || strings.HasPrefix(name, "TRANS_CHECK_MAX_TIME_TOPIC"):
		return fmt.Errorf("%w: %w: topic %q is reserved by the broker", ErrInvalidMessage, ErrInvalidTopic, name)
	}
	return nil
}

// AllKeys returns the message keys to publish: the txmsg ID first, then
// m.Keys without duplicates.
func (m *Message) AllKeys() []string {
	keys := make([]string, 0, len(m.Keys)+1)
	if m.ID != "" {
		keys = append(keys, m.ID)
	}
	for _, k := range m.Keys {
		if k != m.ID {
			keys = append(keys, k)
		}
	}
	return keys
}

// reservedProperty reports whether name is a property the broker protocol
// or txmsg sets itself; applications may not set it.
func reservedProperty(name string) bool {
	return reservedProperties[name] || name == PropertyID || name == PropertyShardingKey || name == PropertyTopic ||
		name == PropertyDeliverAt
}

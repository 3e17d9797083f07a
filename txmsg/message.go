package txmsg

import (
	"fmt"
	"regexp"
	"strings"
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
)

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
	return reservedProperties[name] || name == PropertyID || name == PropertyShardingKey || name == PropertyTopic
}

package outbox

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txmsg/txmsg/txmsg"
)

// DefaultTable is the outbox table's default name. The lease table of
// relays is named after it with a "_lease" suffix, and the table the
// relays register in with a "_relay" suffix.
const DefaultTable = "txmsg_outbox"

// Status is the state of an outbox row, as stored in the status column.
type Status string

// Name returns the status's name as txmsg's tools show it: pending, sent
// or parked. string(s) is the stored value, which for [StatusParked] is
// "dead".
func (s Status) Name() string {
	if s == StatusParked {
		return "parked"
	}
	return string(s)
}

const (
	// StatusPending rows wait for a relay to publish them.
	StatusPending Status = "pending"
	// StatusSent rows were published; they are purged after the relay's
	// retention period.
	StatusSent Status = "sent"
	// StatusParked rows failed MaxAttempts times and wait for an operator.
	// They stay until someone requeues ([Outbox.Requeue]) or deletes
	// ([Outbox.DeleteParked], [Outbox.PurgeParked]) them. The status
	// column stores it as "dead", the value of earlier releases, so tables
	// need no migration: queries on the table by hand use status = 'dead'.
	StatusParked Status = "dead"
)

// Row is one message in the outbox table. outbox.sql holds the same table
// as MySQL/MariaDB DDL. Its times, like those of [Lease] and [Member], are
// written with the database's clock in UTC (UTC_TIMESTAMP), so that the
// writers' and relays' clocks and their DSNs' time zones (loc) do not
// matter; the driver reads them in the DSN's loc. The identifier columns (msg_id, topic, tag, keys,
// sharding_key) are VARBINARY so that they compare byte for byte whatever
// the database's collation; their sizes are bytes, which newRow and
// Message.Validate check.
type Row struct {
	// ID is the auto-increment key: the relay's publishing order.
	ID int64 `gorm:"primaryKey;autoIncrement;index:idx_outbox_due,priority:3;index:idx_outbox_bucket,priority:3;index:idx_outbox_bucket_due,priority:4"`
	// MsgID is the txmsg ID, unique.
	MsgID string `gorm:"column:msg_id;type:varbinary(255);size:255;not null;uniqueIndex:uk_outbox_msg_id"`
	// Topic is the message's topic.
	Topic string `gorm:"type:varbinary(127);size:127;not null"`
	// Tag is the message's tag; empty for none.
	Tag string `gorm:"type:varbinary(255);size:255;not null;default:''"`
	// Keys are the message's extra keys, space-separated.
	Keys string `gorm:"type:varbinary(1024);size:1024;not null;default:''"`
	// ShardingKey is the message's sharding key; empty for none.
	ShardingKey string `gorm:"type:varbinary(255);size:255;not null;default:''"`
	// Bucket is the row's bucket: a hash of ShardingKey modulo the bucket
	// count, or a random bucket for rows without a key. Relays lease
	// buckets and claim only from their own.
	Bucket int `gorm:"size:32;not null;default:0;index:idx_outbox_bucket,priority:2;index:idx_outbox_bucket_due,priority:2"`
	// Body is the payload.
	Body []byte `gorm:"type:longblob;not null"`
	// Properties are the user properties as a JSON object.
	Properties string `gorm:"type:text;not null"`
	// Status is pending, sent or parked (stored as "dead").
	Status Status `gorm:"size:16;not null;index:idx_outbox_due,priority:1;index:idx_outbox_bucket,priority:1;index:idx_outbox_status_updated,priority:1;index:idx_outbox_bucket_due,priority:1"`
	// Attempts counts failed publish attempts.
	Attempts int `gorm:"size:32;not null;default:0"`
	// NextAttemptAt is when a relay may publish the row next.
	NextAttemptAt time.Time `gorm:"precision:6;not null;index:idx_outbox_due,priority:2;index:idx_outbox_bucket_due,priority:3"`
	// LastError is the error of the last failed attempt, truncated.
	LastError string `gorm:"size:1024;not null;default:''"`
	// CreatedAt is when the row was inserted.
	CreatedAt time.Time `gorm:"precision:6;not null;autoCreateTime:false"`
	// UpdatedAt is when the row last changed state or failed; purges of
	// sent and parked rows use it.
	UpdatedAt time.Time `gorm:"precision:6;not null;autoUpdateTime:false;index:idx_outbox_status_updated,priority:2"`
	// SentAt is when the row was published, nil while it is not.
	SentAt *time.Time `gorm:"precision:6"`
	// DeliverAt is the due time of a delayed message (txmsg.WithDelay),
	// nil for one to publish at once. The row is inserted with
	// NextAttemptAt at this time, so relays claim it only when it is due,
	// by the database's clock; the relay sends it with its due time
	// (txmsg.PropertyDeliverAt).
	DeliverAt *time.Time `gorm:"precision:6"`

	// due is the SQL expression of the row's due time at insert: the
	// database's clock, plus the message's delay, or its DeliverAt.
	due string
}

// Column limits the message must fit, beyond txmsg's own rules.
const (
	maxErrorLen      = 1024
	maxKeysLen       = 1024
	maxPropertiesLen = 65535
)

// newRow builds the pending row for a message that passed Validate, and
// checks that it fits the table's columns. The caller sets MsgID. Its
// times are now; the INSERT writes the database's clock instead.
func newRow(m *txmsg.Message, buckets int, now time.Time) (*Row, error) {
	props := "{}"
	if len(m.Properties) > 0 {
		b, err := json.Marshal(m.Properties)
		if err != nil {
			return nil, fmt.Errorf("%w: properties: %w", txmsg.ErrInvalidMessage, err)
		}
		props = string(b)
	}
	if len(props) > maxPropertiesLen {
		return nil, fmt.Errorf("%w: properties take %d bytes as JSON; the outbox holds %d", txmsg.ErrInvalidMessage, len(props), maxPropertiesLen)
	}
	keys := strings.Join(m.Keys, " ")
	if len(keys) > maxKeysLen {
		return nil, fmt.Errorf("%w: keys take %d bytes; the outbox holds %d", txmsg.ErrInvalidMessage, len(keys), maxKeysLen)
	}
	due, delayed, err := m.Due(now)
	if err != nil {
		return nil, err
	}
	dueExpr := dbClock
	switch {
	case delayed && m.Delay > 0:
		dueExpr = fmt.Sprintf("DATE_ADD(%s, INTERVAL %d MICROSECOND)", dbClock, (m.Delay + time.Microsecond - 1).Microseconds())
	case delayed:
		// Rounded up to the column's microseconds: never due early.
		due = due.UTC().Add(time.Microsecond - 1).Truncate(time.Microsecond)
		dueExpr = "'" + due.Format("2006-01-02 15:04:05.000000") + "'"
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	return &Row{
		Topic:         m.Topic,
		Tag:           m.Tag,
		Keys:          keys,
		ShardingKey:   m.ShardingKey,
		Bucket:        bucketOf(m.ShardingKey, buckets),
		Body:          body,
		Properties:    props,
		Status:        StatusPending,
		NextAttemptAt: now,
		CreatedAt:     now,
		UpdatedAt:     now,
		due:           dueExpr,
	}, nil
}

// dueExpr is the SQL expression of the row's due time: the database's
// clock for a row built by newRow without a delay.
func (r *Row) dueExpr() string {
	if r.due == "" {
		return dbClock
	}
	return r.due
}

// deliverAtExpr is what the INSERT writes to deliver_at: the due time of a
// delayed row, else NULL.
func (r *Row) deliverAtExpr() string {
	if r.due == "" || r.due == dbClock {
		return "NULL"
	}
	return r.due
}

// bucketOf hashes key into [0, buckets). Rows without a key need no order,
// so they are spread at random.
func bucketOf(key string, buckets int) int {
	if key == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		return int(binary.BigEndian.Uint32(b[:]) % uint32(buckets))
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(buckets))
}

// message rebuilds the envelope a row stores.
func (r *Row) message() (*txmsg.Message, error) {
	m := &txmsg.Message{
		ID:          r.MsgID,
		Topic:       r.Topic,
		Tag:         r.Tag,
		Keys:        strings.Fields(r.Keys),
		ShardingKey: r.ShardingKey,
		Body:        r.Body,
	}
	if r.DeliverAt != nil {
		m.DeliverAt = *r.DeliverAt
	}
	if r.Properties != "" && r.Properties != "{}" {
		if err := json.Unmarshal([]byte(r.Properties), &m.Properties); err != nil {
			return nil, fmt.Errorf("outbox: row %d has unreadable properties: %w", r.ID, err)
		}
	}
	return m, nil
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

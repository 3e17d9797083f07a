package txmsg

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// DefaultFailingTable is the default name of the table of messages whose
// handler is failing ([FailingRow]).
const DefaultFailingTable = "txmsg_inbox_failing"

// Bounds of what a [FailingRow] keeps of a message and its error.
const (
	// MaxFailingBody is how much of a failing message's body its row
	// keeps: the first 64 KiB. FailingRow.BodySize is the whole size.
	MaxFailingBody = 64 << 10
	// MaxFailingError is how much of the handler's last error its row
	// keeps, in bytes: the first 4 KiB, cut at a character boundary.
	MaxFailingError = 4 << 10
)

// failingWriteTimeout bounds each write of the failing table, so that a
// database that does not answer holds a delivery this long at most.
const failingWriteTimeout = 2 * time.Second

// FailingRow is a message whose handler is failing for one consumer
// group: one row of the failing table per (group, message ID). The inbox
// writes it, outside the handler's rolled-back transaction, each time the
// handler returns an error or panics, and deletes it when a later
// delivery of the message is handled, found a duplicate or parked. What
// is left are the messages still being retried and those the broker gave
// up on (DeadLettered); [Inbox.PurgeFailing] deletes rows by age.
//
// The row is a record for operators, never the message itself: the broker
// keeps redelivering it (or, dead-lettered, keeps it in %DLQ%<group>),
// whether or not its row could be written. The identifier columns are
// VARBINARY like the inbox's.
type FailingRow struct {
	ID              int64  `gorm:"primaryKey;autoIncrement"`
	ConsumerGroup   string `gorm:"type:varbinary(255);size:255;not null;uniqueIndex:uk_txmsg_failing_group_msg,priority:1"`
	MsgID           string `gorm:"column:msg_id;type:varbinary(255);size:255;not null;uniqueIndex:uk_txmsg_failing_group_msg,priority:2"`
	BrokerMessageID string `gorm:"type:varbinary(255);size:255;not null"`
	Topic           string `gorm:"type:varbinary(127);size:127;not null"`
	Tag             string `gorm:"size:255;not null"`
	Keys            string `gorm:"size:1024;not null"`
	Properties      string `gorm:"type:text;not null"`
	// Body is the first [MaxFailingBody] bytes of the message's body;
	// BodySize is the whole body's size.
	Body     []byte `gorm:"type:mediumblob"`
	BodySize int    `gorm:"not null"`
	// Failures counts the failed attempts recorded; Attempt is the last
	// one's delivery count (Received.Attempt), which the broker keeps
	// across redeliveries and consumer restarts.
	Failures int `gorm:"not null"`
	Attempt  int `gorm:"not null"`
	// Error is the last failure's error, its first [MaxFailingError]
	// bytes.
	Error string `gorm:"type:text;not null"`
	// DeadLettered is set when the last failure was the message's final
	// attempt (Received.Final): the broker moved it to the group's
	// dead-letter topic, %DLQ%<group>, and does not deliver it again.
	DeadLettered  bool      `gorm:"not null"`
	FirstFailedAt time.Time `gorm:"precision:6;not null"`
	LastFailedAt  time.Time `gorm:"precision:6;not null;index:idx_txmsg_failing_last_failed_at"`
}

// BodyTruncated reports whether Body holds only the first part of the
// message's body.
func (r FailingRow) BodyTruncated() bool { return r.BodySize > len(r.Body) }

// Message rebuilds the failing message from its row, with its txmsg ID so
// that the group's inbox still dedupes it, for a retry now
// ([GroupPublisher]). A row that holds only the start of the body
// (BodyTruncated) cannot be rebuilt: the error wraps [ErrInvalidMessage].
func (r FailingRow) Message() (*Message, error) {
	if r.BodyTruncated() {
		return nil, fmt.Errorf("%w: failing message %s: only the first %d of its %d body bytes are stored; the broker's copy is retried by itself",
			ErrInvalidMessage, r.MsgID, len(r.Body), r.BodySize)
	}
	m := &Message{ID: r.MsgID, Topic: r.Topic, Tag: r.Tag, Keys: strings.Fields(r.Keys), Body: r.Body}
	if r.Properties != "" && r.Properties != "{}" && r.Properties != "null" {
		var props map[string]string
		if err := json.Unmarshal([]byte(r.Properties), &props); err != nil {
			return nil, fmt.Errorf("txmsg: failing message %s has unreadable properties: %w", r.MsgID, err)
		}
		for k, v := range props {
			if !reservedProperty(k) {
				if m.Properties == nil {
					m.Properties = map[string]string{}
				}
				m.Properties[k] = v
			}
		}
	}
	return m, nil
}

// FailingTable returns the failing table's name.
func (in *Inbox) FailingTable() string { return in.failing }

// failingLog rate-limits the warnings of failed writes to the failing
// table: one a minute, the others at debug level.
type failingLog struct{ last atomic.Int64 }

func (l *failingLog) warn(in *Inbox, msg string, args ...any) {
	now := time.Now().UnixNano()
	if last := l.last.Load(); now-last >= int64(time.Minute) && l.last.CompareAndSwap(last, now) {
		in.logger.Warn(msg, args...)
		return
	}
	in.logger.Debug(msg, args...)
}

// noteOutcome keeps the failing table in step with one delivery's result:
// a failure is recorded, and a delivery after a failure that was handled,
// a duplicate or parked removes the record. A failure while ctx is done
// (the consumer closing) is not the handler's and is not recorded. It
// never fails: a write that fails is logged and the consumer goes on.
func (in *Inbox) noteOutcome(ctx context.Context, group string, rec *Received, err error) {
	switch {
	case err != nil && ctx.Err() == nil:
		in.recordFailure(ctx, group, rec, err)
	case err == nil && rec.Attempt > 1:
		// Only a redelivery can have a row: a first delivery that failed
		// comes back with Attempt 2 or more.
		in.clearFailure(ctx, group, rec.Message.ID)
	}
}

// recordFailure upserts rec's row of the failing table with cause.
func (in *Inbox) recordFailure(ctx context.Context, group string, rec *Received, cause error) {
	m := rec.Message
	if group == "" || m.ID == "" {
		return
	}
	props, _ := jsonString(m.Properties)
	body := m.Body
	if len(body) > MaxFailingBody {
		body = body[:MaxFailingBody]
	}
	now := time.Now().UTC()
	row := FailingRow{
		ConsumerGroup:   group,
		MsgID:           m.ID,
		BrokerMessageID: rec.BrokerMessageID,
		Topic:           m.Topic,
		Tag:             cut(m.Tag, 255),
		Keys:            cut(joinKeys(m.Keys), 1024),
		Properties:      props,
		Body:            body,
		BodySize:        len(m.Body),
		Failures:        1,
		Attempt:         rec.Attempt,
		Error:           cut(cause.Error(), MaxFailingError),
		DeadLettered:    rec.Final,
		FirstFailedAt:   now,
		LastFailedAt:    now,
	}
	ctx, cancel := context.WithTimeout(ctx, failingWriteTimeout)
	defer cancel()
	update := append(clause.AssignmentColumns([]string{"broker_message_id", "attempt", "error", "dead_lettered", "last_failed_at"}),
		clause.Assignment{Column: clause.Column{Name: "failures"}, Value: gorm.Expr("failures + 1")})
	err := in.db.WithContext(ctx).Table(in.failing).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "consumer_group"}, {Name: "msg_id"}},
		DoUpdates: update,
	}).Create(&row).Error
	if err != nil {
		in.failLog.warn(in, "could not record the handler's failure in the failing table (the message is retried all the same); run Inbox.Migrate if the table is missing",
			"failing_table", in.failing, "group", group, "txmsg_id", m.ID, "err", err)
	}
}

// clearFailure deletes the failing row of (group, id), if there is one.
func (in *Inbox) clearFailure(ctx context.Context, group, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failingWriteTimeout)
	defer cancel()
	err := FailingFilter{Group: group, IDs: []string{id}}.apply(in.db.WithContext(ctx).Table(in.failing)).Delete(map[string]any{}).Error
	if err != nil {
		in.failLog.warn(in, "could not delete a handled message from the failing table; Inbox.PurgeFailing removes it later",
			"failing_table", in.failing, "group", group, "txmsg_id", id, "err", err)
	}
}

// cut returns s's first n bytes at most, cut at a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// FailingFilter selects rows of the failing table for [Inbox.Failing].
// The zero value selects every one; the fields that are set must all
// match.
type FailingFilter struct {
	// Group keeps the messages of this consumer group only; empty means
	// every group.
	Group string
	// IDs keeps the messages with these txmsg IDs only; empty means all.
	IDs []string
	// AfterID, when positive, starts after the row with this primary key
	// (FailingRow.ID): the ID of the last row of the previous page.
	AfterID int64
	// Limit is the most rows returned, oldest first; 0 means no limit.
	Limit int
}

func (f FailingFilter) apply(q *gorm.DB) *gorm.DB {
	if len(f.IDs) > 0 {
		q = q.Where(clause.IN{Column: clause.Column{Name: "msg_id"}, Values: anySlice(f.IDs)})
	}
	if f.Group != "" {
		q = q.Where(clause.Eq{Column: clause.Column{Name: "consumer_group"}, Value: f.Group})
	}
	if f.AfterID > 0 {
		q = q.Where(clause.Gt{Column: clause.Column{Name: "id"}, Value: f.AfterID})
	}
	return q
}

// Failing returns the messages whose handler is failing (or failed for the
// last time, FailingRow.DeadLettered) that f selects, in the order of
// their first failure, one page at a time with f.AfterID and f.Limit.
func (in *Inbox) Failing(ctx context.Context, f FailingFilter) ([]FailingRow, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("%w: inbox: failing messages: Limit must not be negative; 0 means no limit", ErrInvalidConfig)
	}
	q := f.apply(in.db.WithContext(ctx).Table(in.failing)).Order("id")
	if f.Limit > 0 {
		q = q.Limit(f.Limit)
	}
	var rows []FailingRow
	if err := q.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("txmsg: read %s (run Inbox.Migrate or txmsgctl migrate if it does not exist): %w", in.failing, err)
	}
	return rows, nil
}

// FailingByGroup counts the rows of the failing table of each consumer
// group.
func (in *Inbox) FailingByGroup(ctx context.Context) (map[string]int64, error) {
	return in.countByGroup(ctx, in.failing)
}

// DeleteFailing deletes the failing rows of group (every group when
// empty) with the given txmsg IDs and returns how many it deleted. It
// changes nothing on the broker: a message still being retried comes back
// and, failing again, gets a new row. With no IDs it deletes nothing.
func (in *Inbox) DeleteFailing(ctx context.Context, group string, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	res := FailingFilter{Group: group, IDs: ids}.apply(in.db.WithContext(ctx).Table(in.failing)).Delete(map[string]any{})
	if res.Error != nil {
		return 0, fmt.Errorf("txmsg: delete from %s: %w", in.failing, res.Error)
	}
	return res.RowsAffected, nil
}

// PurgeFailing deletes the failing rows whose last failure is more than
// olderThan ago (zero means all of them), of group when it is not empty,
// in batches of batch rows (0 means [DefaultPurgeBatch]), and returns how
// many it deleted. A row whose message is still being retried is written
// again at its next failure, so a purge loses no more than the count of
// earlier failures; the rows it is for are those of messages the broker
// dead-lettered, which no later delivery removes.
func (in *Inbox) PurgeFailing(ctx context.Context, olderThan time.Duration, batch int, group string) (int64, error) {
	return in.purgeOlder(ctx, in.failing, "last_failed_at", "failing messages", olderThan, batch, group)
}

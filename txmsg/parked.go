package txmsg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/internal/store"
)

// ParkedFilter selects parked messages (rows of the parked table) for
// [Inbox.Parked]. The zero value selects every one; the fields that are
// set must all match.
type ParkedFilter struct {
	// Group keeps the messages parked by this consumer group only; empty
	// means every group.
	Group string
	// IDs keeps the messages with these txmsg IDs only; empty means all.
	IDs []string
	// Key, when set, keeps the messages whose txmsg ID or one of whose
	// keys equals it.
	Key string
	// AfterID, when positive, starts after the row with this primary key
	// (ParkedRow.ID): the ID of the last row of the previous page.
	AfterID int64
	// Limit is the most rows returned, oldest first; 0 means no limit.
	Limit int
}

func (f ParkedFilter) apply(q *gorm.DB) *gorm.DB {
	if len(f.IDs) > 0 {
		q = q.Where(clause.IN{Column: clause.Column{Name: "msg_id"}, Values: anySlice(f.IDs)})
	}
	if f.Group != "" {
		q = q.Where(clause.Eq{Column: clause.Column{Name: "consumer_group"}, Value: f.Group})
	}
	if f.Key != "" {
		esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(f.Key)
		col := clause.Column{Name: "keys"}
		q = q.Where(clause.Or(
			clause.Eq{Column: clause.Column{Name: "msg_id"}, Value: f.Key},
			clause.Eq{Column: col, Value: f.Key},
			clause.Like{Column: col, Value: esc + " %"},
			clause.Like{Column: col, Value: "% " + esc},
			clause.Like{Column: col, Value: "% " + esc + " %"},
		))
	}
	if f.AfterID > 0 {
		q = q.Where(clause.Gt{Column: clause.Column{Name: "id"}, Value: f.AfterID})
	}
	return q
}

func anySlice(ids []string) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// Parked returns the parked messages f selects, oldest first, for
// inspection before [Inbox.RequeueParked] or [Inbox.DeleteParked], and one
// page at a time with f.AfterID and f.Limit. A search by f.Key reads the
// keys column without an index; bound the call's context.
func (in *Inbox) Parked(ctx context.Context, f ParkedFilter) ([]ParkedRow, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("%w: inbox: parked messages: Limit must not be negative; 0 means no limit", ErrInvalidConfig)
	}
	q := f.apply(in.db.WithContext(ctx).Table(in.parked)).Order("id")
	if f.Limit > 0 {
		q = q.Limit(f.Limit)
	}
	var rows []ParkedRow
	if err := q.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("txmsg: read %s: %w", in.parked, err)
	}
	return rows, nil
}

// DeleteParked deletes the parked messages with the given txmsg IDs, of
// group when it is not empty, and returns how many rows it deleted. Their
// messages are never handled. With no IDs it deletes nothing.
func (in *Inbox) DeleteParked(ctx context.Context, group string, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	res := ParkedFilter{Group: group, IDs: ids}.apply(in.db.WithContext(ctx).Table(in.parked)).Delete(map[string]any{})
	if res.Error != nil {
		return 0, fmt.Errorf("txmsg: delete from %s: %w", in.parked, res.Error)
	}
	if res.RowsAffected > 0 {
		in.logger.Info("deleted parked messages", "rows", res.RowsAffected, "group", group, "txmsg_ids", ids)
	}
	return res.RowsAffected, nil
}

// PurgeParked deletes the messages parked more than olderThan ago (zero
// means all of them), of group when it is not empty, in batches of batch
// rows (0 means [DefaultPurgeBatch]), and returns how many it deleted.
func (in *Inbox) PurgeParked(ctx context.Context, olderThan time.Duration, batch int, group string) (int64, error) {
	return in.purgeOlder(ctx, in.parked, "parked_at", "parked messages", olderThan, batch, group)
}

// purgeOlder deletes the rows of table whose column is more than
// olderThan ago (zero means all of them), of group when it is not empty,
// in batches; what names the rows in errors and the log.
func (in *Inbox) purgeOlder(ctx context.Context, table, column, what string, olderThan time.Duration, batch int, group string) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("%w: inbox: purge of %s needs an age of zero or more, not %s", ErrInvalidConfig, what, olderThan)
	}
	var where []clause.Expression
	if group != "" {
		where = append(where, clause.Eq{Column: clause.Column{Name: "consumer_group"}, Value: group})
	}
	// The cutoff is a little in the future for olderThan 0, so that "all"
	// includes a row written in this very microsecond.
	cutoff := time.Now().UTC().Add(-olderThan)
	if olderThan == 0 {
		cutoff = cutoff.Add(time.Second)
	}
	n, err := store.PurgeBefore(ctx, in.db, table, "id", column, cutoff, batch, where...)
	if n > 0 {
		in.logger.Info("purged "+what, "rows", n, "group", group, "older_than", olderThan)
	}
	if err != nil {
		return n, fmt.Errorf("txmsg: %w", err)
	}
	return n, nil
}

// Message rebuilds the message d holds, with its txmsg ID, so that
// consumers still dedupe it, and its user properties (the reserved ones
// are set again when it is sent).
func (d ParkedRow) Message() (*Message, error) {
	m := &Message{ID: d.MsgID, Topic: d.Topic, Tag: d.Tag, Keys: strings.Fields(d.Keys), Body: d.Body}
	if d.Properties != "" && d.Properties != "{}" && d.Properties != "null" {
		var props map[string]string
		if err := json.Unmarshal([]byte(d.Properties), &props); err != nil {
			return nil, fmt.Errorf("txmsg: parked message %s has unreadable properties: %w", d.MsgID, err)
		}
		for k, v := range props {
			if reservedProperty(k) {
				continue
			}
			if m.Properties == nil {
				m.Properties = map[string]string{}
			}
			m.Properties[k] = v
		}
	}
	return m, nil
}

// RequeuedParked is what [Inbox.RequeueParked] did with one parked row.
type RequeuedParked struct {
	// ID and Topic are the message's.
	ID, Topic string
	// Group is the consumer group that parked it, and the only one the
	// replay reaches.
	Group string
	// Deleted is how many parked rows were deleted (1, or 0 when another
	// requeue deleted the row meanwhile).
	Deleted int64
}

// RequeueParked replays each parked message with one of the given txmsg
// IDs (of group when it is not empty) to the consumer group that parked
// it, and to that group alone, through pub, and deletes its parked row.
// A message parked by two groups is replayed to each of them. Groups that
// did not park it never see it again: a replay to the topic would reach
// them all, and one whose inbox rows were purged would apply the message
// twice. pub must therefore be a [GroupPublisher] ([txrmq.Publisher] is);
// any other Publisher is refused with [ErrInvalidConfig].
//
// It returns what it requeued; IDs with no parked row are left out.
// Failures of single rows are joined in the error, and those rows stay
// parked: a group the broker does not know, for one, is refused.
//
// A row is deleted in a transaction that commits only after the broker
// accepted the message, so a consumer that parks the message again
// meanwhile waits for it and then parks it anew: nothing is deleted that
// was parked after the publish, and nothing is deleted unpublished.
//
// [txrmq.Publisher]: https://pkg.go.dev/github.com/txmsg/txmsg/adapters/txrmq#Publisher
func (in *Inbox) RequeueParked(ctx context.Context, pub Publisher, group string, ids ...string) ([]RequeuedParked, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: inbox: requeue of parked messages needs a publisher", ErrInvalidConfig)
	}
	gp, ok := pub.(GroupPublisher)
	if !ok {
		return nil, fmt.Errorf("%w: inbox: requeue of parked messages needs a publisher that delivers to one consumer group "+
			"(txmsg.GroupPublisher; txrmq.Publisher is one), not %T: published to its topic again, a message reaches every "+
			"group subscribed to it, and a group whose inbox rows were purged applies it twice", ErrInvalidConfig, pub)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := in.Parked(ctx, ParkedFilter{Group: group, IDs: ids})
	if err != nil {
		return nil, err
	}
	var done []RequeuedParked
	var errs []error
	for _, r := range rows {
		m, err := r.Message()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var deleted int64
		err = in.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			res := ParkedFilter{Group: r.ConsumerGroup, IDs: []string{m.ID}}.apply(tx.Table(in.parked)).Delete(map[string]any{})
			if res.Error != nil {
				return fmt.Errorf("txmsg: delete parked %s of group %s from %s: %w", m.ID, r.ConsumerGroup, in.parked, res.Error)
			}
			deleted = res.RowsAffected
			if err := gp.PublishToGroup(ctx, r.ConsumerGroup, m); err != nil {
				return fmt.Errorf("txmsg: replay %s to group %s (its parked row stays): %w", m.ID, r.ConsumerGroup, err)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		in.logger.Info("replayed parked message to its group", "txmsg_id", m.ID, "topic", m.Topic, "group", r.ConsumerGroup, "rows", deleted)
		done = append(done, RequeuedParked{ID: m.ID, Topic: m.Topic, Group: r.ConsumerGroup, Deleted: deleted})
	}
	return done, errors.Join(errs...)
}

// HandledByGroup counts the inbox rows of each consumer group.
func (in *Inbox) HandledByGroup(ctx context.Context) (map[string]int64, error) {
	return in.countByGroup(ctx, in.table)
}

// ParkedByGroup counts the parked messages of each consumer group.
func (in *Inbox) ParkedByGroup(ctx context.Context) (map[string]int64, error) {
	return in.countByGroup(ctx, in.parked)
}

func (in *Inbox) countByGroup(ctx context.Context, table string) (map[string]int64, error) {
	var rows []struct {
		ConsumerGroup string
		N             int64
	}
	err := in.db.WithContext(ctx).Table(table).Select("consumer_group, COUNT(*) AS n").Group("consumer_group").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("txmsg: count %s: %w", table, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.ConsumerGroup] = r.N
	}
	return out, nil
}

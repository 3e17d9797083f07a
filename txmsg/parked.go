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

// ParkedFilter selects parked messages (rows of the dead-letter table).
type ParkedFilter struct {
	// Group keeps the messages parked by this consumer group only; empty
	// means every group.
	Group string
	// IDs keeps the messages with these txmsg IDs only; empty means all.
	IDs []string
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
// inspection before [Inbox.RequeueParked] or [Inbox.DeleteParked].
func (in *Inbox) Parked(ctx context.Context, f ParkedFilter) ([]DeadLetter, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("%w: inbox: parked messages: Limit must not be negative", ErrInvalidConfig)
	}
	q := f.apply(in.db.WithContext(ctx).Table(in.dead)).Order("id")
	if f.Limit > 0 {
		q = q.Limit(f.Limit)
	}
	var rows []DeadLetter
	if err := q.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("txmsg: read %s: %w", in.dead, err)
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
	res := ParkedFilter{Group: group, IDs: ids}.apply(in.db.WithContext(ctx).Table(in.dead)).Delete(map[string]any{})
	if res.Error != nil {
		return 0, fmt.Errorf("txmsg: delete from %s: %w", in.dead, res.Error)
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
	if olderThan < 0 {
		return 0, fmt.Errorf("%w: inbox: purge of parked messages needs an age of zero or more, not %s", ErrInvalidConfig, olderThan)
	}
	var where []clause.Expression
	if group != "" {
		where = append(where, clause.Eq{Column: clause.Column{Name: "consumer_group"}, Value: group})
	}
	// The cutoff is a little in the future for olderThan 0, so that "all"
	// includes a row parked in this very microsecond.
	cutoff := time.Now().UTC().Add(-olderThan)
	if olderThan == 0 {
		cutoff = cutoff.Add(time.Second)
	}
	n, err := store.PurgeBefore(ctx, in.db, in.dead, "id", "parked_at", cutoff, batch, where...)
	if n > 0 {
		in.logger.Info("purged parked messages", "rows", n, "group", group, "older_than", olderThan)
	}
	if err != nil {
		return n, fmt.Errorf("txmsg: %w", err)
	}
	return n, nil
}

// Message rebuilds the message d holds, with its txmsg ID, so that
// consumers still dedupe it, and its user properties (the reserved ones
// are set again when it is sent).
func (d DeadLetter) Message() (*Message, error) {
	m := &Message{ID: d.MsgID, Topic: d.Topic, Tag: d.Tag, Keys: strings.Fields(d.Keys), Body: d.Body}
	if d.Properties != "" && d.Properties != "{}" && d.Properties != "null" {
		var props map[string]string
		if err := json.Unmarshal([]byte(d.Properties), &props); err != nil {
			return nil, fmt.Errorf("txmsg: parked message %s has unreadable properties: %w", d.MsgID, err)
		}
		for k, v := range props {
			if ReservedProperty(k) {
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

// RequeuedParked is what [Inbox.RequeueParked] did with one message.
type RequeuedParked struct {
	// ID and Topic are the message's.
	ID, Topic string
	// Deleted is how many parked rows of the message were deleted (one
	// per consumer group that parked it, or only group's).
	Deleted int64
}

// RequeueParked publishes each parked message with one of the given txmsg
// IDs (of group when it is not empty) again through pub, once per ID
// whichever groups parked it, and deletes its parked rows. Every group
// subscribed to the topic receives it; those that handled it before drop
// it as a duplicate. It returns what it requeued; IDs with no parked row
// are left out. Failures of single messages are joined in the error; their
// rows stay parked.
//
// The rows are deleted in a transaction that commits only after the
// broker accepted the message, so a consumer that parks the message again
// meanwhile waits for it and then parks it anew: nothing is deleted that
// was parked after the publish, and nothing is deleted unpublished.
func (in *Inbox) RequeueParked(ctx context.Context, pub Publisher, group string, ids ...string) ([]RequeuedParked, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: inbox: requeue of parked messages needs a publisher", ErrInvalidConfig)
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
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.MsgID] {
			continue
		}
		seen[r.MsgID] = true
		m, err := r.Message()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var deleted int64
		err = in.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			res := ParkedFilter{Group: group, IDs: []string{m.ID}}.apply(tx.Table(in.dead)).Delete(map[string]any{})
			if res.Error != nil {
				return fmt.Errorf("txmsg: delete parked %s from %s: %w", m.ID, in.dead, res.Error)
			}
			deleted = res.RowsAffected
			if err := pub.Publish(ctx, m); err != nil {
				return fmt.Errorf("txmsg: republish %s to %s (its parked rows stay): %w", m.ID, m.Topic, err)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		in.logger.Info("requeued parked message", "txmsg_id", m.ID, "topic", m.Topic, "group", group, "rows", deleted)
		done = append(done, RequeuedParked{ID: m.ID, Topic: m.Topic, Deleted: deleted})
	}
	return done, errors.Join(errs...)
}

// HandledByGroup counts the inbox rows of each consumer group.
func (in *Inbox) HandledByGroup(ctx context.Context) (map[string]int64, error) {
	return in.countByGroup(ctx, in.table)
}

// ParkedByGroup counts the parked messages of each consumer group.
func (in *Inbox) ParkedByGroup(ctx context.Context) (map[string]int64, error) {
	return in.countByGroup(ctx, in.dead)
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

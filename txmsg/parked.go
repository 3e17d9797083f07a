package txmsg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// MaxParkedLimit is the most parked messages [Inbox.Parked] returns at
// once.
const MaxParkedLimit = 1000

// ParkedFilter selects parked messages for [Inbox.Parked]. The zero value
// lists every one, oldest first, 100 at a time.
type ParkedFilter struct {
	// Group, when set, keeps the messages parked by that consumer group.
	Group string
	// Key, when set, keeps messages whose txmsg ID or one of whose keys
	// equals it.
	Key string
	// AfterID, when positive, starts after the row with this primary key.
	AfterID int64
	// Limit is the page size: 0 means 100; at most [MaxParkedLimit].
	Limit int
}

// ErrNotParked means no parked message matches the txmsg ID (and group)
// asked for.
var ErrNotParked = errors.New("txmsg: no such parked message")

// Parked returns the parked messages matching f, oldest first.
func (in *Inbox) Parked(ctx context.Context, f ParkedFilter) ([]DeadLetter, error) {
	if f.Limit < 0 || f.Limit > MaxParkedLimit {
		return nil, fmt.Errorf("%w: inbox: limit %d is not between 0 and %d", ErrInvalidConfig, f.Limit, MaxParkedLimit)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	q := in.db.WithContext(ctx).Table(in.dead)
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
	var rows []DeadLetter
	if err := q.Order("id").Limit(f.Limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("txmsg: list %s: %w", in.dead, err)
	}
	return rows, nil
}

// ParkedMessage returns the message group parked with txmsg ID id, or an
// error wrapping [ErrNotParked].
func (in *Inbox) ParkedMessage(ctx context.Context, group, id string) (*DeadLetter, error) {
	var row DeadLetter
	err := in.db.WithContext(ctx).Table(in.dead).
		Where(clause.Eq{Column: clause.Column{Name: "consumer_group"}, Value: group}).
		Where(clause.Eq{Column: clause.Column{Name: "msg_id"}, Value: id}).Take(&row).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return nil, fmt.Errorf("%w: %q of group %q", ErrNotParked, id, group)
	case err != nil:
		return nil, fmt.Errorf("txmsg: read %s: %w", in.dead, err)
	}
	return &row, nil
}

// Handled returns the inbox rows of txmsg ID id: one per consumer group
// that handled it.
func (in *Inbox) Handled(ctx context.Context, id string) ([]InboxRow, error) {
	var rows []InboxRow
	err := in.db.WithContext(ctx).Table(in.table).
		Where(clause.Eq{Column: clause.Column{Name: "msg_id"}, Value: id}).Order("id").Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("txmsg: read %s: %w", in.table, err)
	}
	return rows, nil
}

// GroupCounts returns the number of inbox rows (handled messages) and of
// parked messages per consumer group.
func (in *Inbox) GroupCounts(ctx context.Context) (handled, parked map[string]int64, err error) {
	count := func(table string) (map[string]int64, error) {
		var rows []struct {
			ConsumerGroup string
			N             int64
		}
		err := in.db.WithContext(ctx).Table(table).Select("consumer_group, COUNT(*) AS n").Group("consumer_group").Scan(&rows).Error
		if err != nil {
			return nil, fmt.Errorf("txmsg: count %s: %w", table, err)
		}
		out := map[string]int64{}
		for _, r := range rows {
			out[r.ConsumerGroup] = r.N
		}
		return out, nil
	}
	if handled, err = count(in.table); err != nil {
		return nil, nil, err
	}
	if parked, err = count(in.dead); err != nil {
		return nil, nil, err
	}
	return handled, parked, nil
}

// Message rebuilds the message a parked row holds, with its txmsg ID, so
// that consumers still dedupe it when it is published again.
func (d *DeadLetter) Message() (*Message, error) {
	m := &Message{ID: d.MsgID, Topic: d.Topic, Tag: d.Tag, Keys: strings.Fields(d.Keys), Body: d.Body}
	if d.Properties != "" && d.Properties != "{}" && d.Properties != "null" {
		var props map[string]string
		if err := json.Unmarshal([]byte(d.Properties), &props); err != nil {
			return nil, fmt.Errorf("txmsg: parked message %s has unreadable properties: %w", d.MsgID, err)
		}
		for k, v := range props {
			if !ReservedProperty(k) {
				if m.Properties == nil {
					m.Properties = map[string]string{}
				}
				m.Properties[k] = v
			}
		}
	}
	return m, nil
}

// ReplayParked publishes the messages group parked with the given txmsg
// IDs again through pub, with their txmsg IDs, and deletes each one's
// parked row once the broker has acknowledged it. Every group subscribed
// to the topic receives the message again; those that handled it before
// drop it as a duplicate. It returns the IDs it replayed; IDs not parked
// by group are reported in an error wrapping [ErrNotParked], after the
// others were replayed.
func (in *Inbox) ReplayParked(ctx context.Context, pub Publisher, group string, ids ...string) ([]string, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: inbox: replay needs a publisher", ErrInvalidConfig)
	}
	var replayed []string
	var errs []error
	for _, id := range ids {
		row, err := in.ParkedMessage(ctx, group, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m, err := row.Message()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := pub.Publish(ctx, m); err != nil {
			errs = append(errs, fmt.Errorf("txmsg: replay %s to %s: %w", id, m.Topic, err))
			continue
		}
		res := in.db.WithContext(ctx).Table(in.dead).
			Where(clause.Eq{Column: clause.Column{Name: "id"}, Value: row.ID}).Delete(map[string]any{})
		if res.Error != nil {
			errs = append(errs, fmt.Errorf("txmsg: %s was replayed to %s, but deleting its parked row failed: %w", id, m.Topic, res.Error))
			continue
		}
		replayed = append(replayed, id)
		in.logger.Info("replayed parked message", "group", group, "txmsg_id", id, "topic", m.Topic)
	}
	return replayed, errors.Join(errs...)
}

// PurgeParked deletes the messages group parked with the given txmsg IDs
// and returns how many it deleted. Their messages are not delivered again.
func (in *Inbox) PurgeParked(ctx context.Context, group string, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	vals := make([]any, len(ids))
	for i, id := range ids {
		vals[i] = id
	}
	res := in.db.WithContext(ctx).Table(in.dead).
		Where(clause.Eq{Column: clause.Column{Name: "consumer_group"}, Value: group}).
		Where(clause.IN{Column: clause.Column{Name: "msg_id"}, Values: vals}).Delete(map[string]any{})
	if res.Error != nil {
		return 0, fmt.Errorf("txmsg: purge %s: %w", in.dead, res.Error)
	}
	if res.RowsAffected > 0 {
		in.logger.Info("purged parked messages", "group", group, "rows", res.RowsAffected, "txmsg_ids", ids)
	}
	return res.RowsAffected, nil
}

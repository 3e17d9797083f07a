package checker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/txmsg/txmsg/txmsg"
)

// keptHeader is the part of a kept message other than its topic and body,
// stored as one JSON line before the body in the message column.
type keptHeader struct {
	Tag         string            `json:"tag,omitempty"`
	Keys        []string          `json:"keys,omitempty"`
	ShardingKey string            `json:"sk,omitempty"`
	Properties  map[string]string `json:"props,omitempty"`
	// DeliverAt is a delayed message's due time (Unix milliseconds, as
	// txmsg.PropertyDeliverAt), so that sending it again never makes it
	// early.
	DeliverAt string `json:"due,omitempty"`
}

// encodeMessage is the message column of msg: its header as one line of
// JSON (which never holds a raw newline), a newline, and the body as is.
func encodeMessage(msg *txmsg.Message) ([]byte, error) {
	kh := keptHeader{Tag: msg.Tag, Keys: msg.Keys, ShardingKey: msg.ShardingKey, Properties: msg.Properties}
	// The barrier row is written after the half message was sent, so a
	// relative delay counted from now is due no earlier than the half
	// message's.
	switch {
	case msg.Delay > 0:
		kh.DeliverAt = txmsg.FormatDeliverAt(time.Now().Add(msg.Delay))
	case !msg.DeliverAt.IsZero():
		kh.DeliverAt = txmsg.FormatDeliverAt(msg.DeliverAt)
	}
	h, err := json.Marshal(kh)
	if err != nil {
		return nil, fmt.Errorf("%w: checker: keep message %s: %w", txmsg.ErrInvalidMessage, msg.ID, err)
	}
	out := make([]byte, 0, len(h)+1+len(msg.Body))
	out = append(out, h...)
	out = append(out, '\n')
	return append(out, msg.Body...), nil
}

// decodeMessage rebuilds the message a barrier row keeps.
func decodeMessage(id, topic string, enc []byte) (*txmsg.Message, error) {
	i := bytes.IndexByte(enc, '\n')
	if i < 0 {
		return nil, fmt.Errorf("checker: barrier row %s keeps an unreadable message (no header line)", id)
	}
	var h keptHeader
	if err := json.Unmarshal(enc[:i], &h); err != nil {
		return nil, fmt.Errorf("checker: barrier row %s keeps an unreadable message: %w", id, err)
	}
	m := &txmsg.Message{
		ID: id, Topic: topic, Tag: h.Tag, Keys: h.Keys, ShardingKey: h.ShardingKey,
		Properties: h.Properties, Body: append([]byte(nil), enc[i+1:]...),
	}
	if h.DeliverAt != "" {
		due, ok := txmsg.ParseDeliverAt(h.DeliverAt)
		if !ok {
			return nil, fmt.Errorf("checker: barrier row %s keeps an unreadable due time %q", id, h.DeliverAt)
		}
		m.DeliverAt = due
	}
	return m, nil
}

// Committed reads one page of the committed barrier rows created in
// [since, until), ordered by ID: up to limit rows whose ID sorts after
// after. It returns the messages of the rows that keep one
// ([Config.KeepMessages]), how many rows keep none (unkept), and next,
// the after of the next page, "" after the last page. A reconciler reads
// the events to check through it. Times are on the producers' clocks,
// which stamp created_at; see [Checker.Now].
func (c *Checker) Committed(ctx context.Context, since, until time.Time, after string, limit int) (msgs []*txmsg.Message, next string, unkept int, err error) {
	var rows []struct {
		TxID    string
		Topic   *string
		Message []byte
	}
	err = c.q.WithContext(ctx).Table(c.cfg.Table).Select("tx_id, topic, message").
		Where("state = ? AND created_at >= ? AND created_at < ? AND tx_id > ?", StateCommitted, since.UTC(), until.UTC(), []byte(after)).
		Order("tx_id").Limit(limit).Scan(&rows).Error
	if err != nil {
		return nil, "", 0, fmt.Errorf("checker: read committed rows of %s: %w", c.cfg.Table, err)
	}
	for _, r := range rows {
		if r.Topic == nil || r.Message == nil {
			unkept++
			continue
		}
		m, err := decodeMessage(r.TxID, *r.Topic, r.Message)
		if err != nil {
			return nil, "", unkept, err
		}
		msgs = append(msgs, m)
	}
	if len(rows) == limit {
		next = rows[len(rows)-1].TxID
	}
	return msgs, next, unkept, nil
}

// Now returns the time on the clock that stamps barrier rows: the
// producer's, in UTC. Committed's window is read on it.
func (c *Checker) Now(context.Context) (time.Time, error) { return time.Now().UTC(), nil }

// ForgetMessages clears the message kept by the barrier rows created in
// [from, before) (see [Config.KeepMessages]), in batches of batch rows (0
// means [txmsg.DefaultPurgeBatch]), and returns how many rows it
// cleared. The rows stay, with their state, for check-backs. A reconciler
// calls it so that the barrier keeps messages only as long as it may need
// them; from bounds the index range each call reads.
func (c *Checker) ForgetMessages(ctx context.Context, from, before time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = txmsg.DefaultPurgeBatch
	}
	var total int64
	for {
		res := c.q.WithContext(ctx).Exec("UPDATE `"+c.cfg.Table+"` SET topic = NULL, message = NULL "+
			"WHERE created_at >= ? AND created_at < ? AND message IS NOT NULL LIMIT ?", from.UTC(), before.UTC(), batch)
		if res.Error != nil {
			return total, fmt.Errorf("checker: forget kept messages in %s: %w", c.cfg.Table, res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < int64(batch) {
			return total, nil
		}
	}
}

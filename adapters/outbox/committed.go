package outbox

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/txmsg"
)

// Committed reads one page of the rows marked sent in [since, until) (by
// updated_at, which the relay sets with sent_at), ordered by txmsg ID: up
// to limit rows whose ID sorts after after. It returns their messages,
// unkept 0 (a sent row keeps its body until Purge deletes it), and next,
// the after of the next page, "" after the last page. A reconciler reads
// the events to check through it. Times are on the database's clock; see
// [Outbox.Now].
func (o *Outbox) Committed(ctx context.Context, since, until time.Time, after string, limit int) (msgs []*txmsg.Message, next string, unkept int, err error) {
	var rows []Row
	err = o.q.WithContext(ctx).Table(o.cfg.Table).
		Select("id, msg_id, topic, tag, `keys`, sharding_key, body, properties").
		Where(clause.Eq{Column: clause.Column{Name: "status"}, Value: StatusSent}).
		Where(clause.Gte{Column: clause.Column{Name: "updated_at"}, Value: since.UTC()}).
		Where(clause.Lt{Column: clause.Column{Name: "updated_at"}, Value: until.UTC()}).
		Where(clause.Gt{Column: clause.Column{Name: "msg_id"}, Value: []byte(after)}).
		Order("msg_id").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, "", 0, fmt.Errorf("outbox: read sent rows of %s: %w", o.cfg.Table, err)
	}
	for i := range rows {
		m, err := rows[i].message()
		if err != nil {
			return nil, "", 0, err
		}
		msgs = append(msgs, m)
	}
	if len(rows) == limit {
		next = rows[len(rows)-1].MsgID
	}
	return msgs, next, 0, nil
}

// Now returns the database's clock in UTC, which stamps the outbox rows:
// Committed's window is read on it.
func (o *Outbox) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := o.q.WithContext(ctx).Raw("SELECT UTC_TIMESTAMP(6)").Scan(&now).Error; err != nil {
		return time.Time{}, fmt.Errorf("outbox: read the database's clock: %w", err)
	}
	return now.UTC(), nil
}

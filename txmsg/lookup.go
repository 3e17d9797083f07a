package txmsg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// MaxParkedPage is the most parked messages [Inbox.FindParked] returns at
// once.
const MaxParkedPage = 1000

// ParkedQuery pages through parked messages for [Inbox.FindParked]. The
// zero value lists every one, oldest first, 100 at a time.
type ParkedQuery struct {
	// Group, when set, keeps the messages parked by that consumer group.
	Group string
	// Key, when set, keeps messages whose txmsg ID or one of whose keys
	// equals it.
	Key string
	// AfterID, when positive, starts after the row with this primary key:
	// the ID of the last row of the previous page.
	AfterID int64
	// Limit is the page size: 0 means 100; at most [MaxParkedPage].
	Limit int
}

// ErrNotParked means no parked message matches the txmsg ID and group
// asked for.
var ErrNotParked = errors.New("txmsg: no such parked message")

// FindParked returns one page of the parked messages q selects, oldest
// first. A search by key reads the keys column without an index; bound
// the call's context.
func (in *Inbox) FindParked(ctx context.Context, q ParkedQuery) ([]DeadLetter, error) {
	if q.Limit < 0 || q.Limit > MaxParkedPage {
		return nil, fmt.Errorf("%w: inbox: page size %d is not between 0 and %d", ErrInvalidConfig, q.Limit, MaxParkedPage)
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	db := in.db.WithContext(ctx).Table(in.dead)
	if q.Group != "" {
		db = db.Where(clause.Eq{Column: clause.Column{Name: "consumer_group"}, Value: q.Group})
	}
	if q.Key != "" {
		esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(q.Key)
		col := clause.Column{Name: "keys"}
		db = db.Where(clause.Or(
			clause.Eq{Column: clause.Column{Name: "msg_id"}, Value: q.Key},
			clause.Eq{Column: col, Value: q.Key},
			clause.Like{Column: col, Value: esc + " %"},
			clause.Like{Column: col, Value: "% " + esc},
			clause.Like{Column: col, Value: "% " + esc + " %"},
		))
	}
	if q.AfterID > 0 {
		db = db.Where(clause.Gt{Column: clause.Column{Name: "id"}, Value: q.AfterID})
	}
	var rows []DeadLetter
	if err := db.Order("id").Limit(q.Limit).Find(&rows).Error; err != nil {
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

package txmsg

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ErrNotParked means no parked message matches the txmsg ID and group
// asked for.
var ErrNotParked = errors.New("txmsg: no such parked message")

// ParkedMessage returns the message group parked with txmsg ID id, or an
// error wrapping [ErrNotParked].
func (in *Inbox) ParkedMessage(ctx context.Context, group, id string) (*ParkedRow, error) {
	var row ParkedRow
	err := in.db.WithContext(ctx).Table(in.parked).
		Where(clause.Eq{Column: clause.Column{Name: "consumer_group"}, Value: group}).
		Where(clause.Eq{Column: clause.Column{Name: "msg_id"}, Value: id}).Take(&row).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return nil, fmt.Errorf("%w: %q of group %q", ErrNotParked, id, group)
	case err != nil:
		return nil, fmt.Errorf("txmsg: read %s: %w", in.parked, err)
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

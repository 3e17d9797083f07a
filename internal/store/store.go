// Package store holds the SQL helpers txmsg's tables share: identifier
// checks, duplicate-key detection and batched purges, all through gorm so
// no dialect's SQL text is hard-coded.
package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

var identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidIdent reports whether name is safe to use as a table name: letters,
// digits and '_', not starting with a digit, at most 64 characters.
func ValidIdent(name string) bool { return identPattern.MatchString(name) }

// IsDuplicate reports whether err is a unique-key violation, in any dialect
// gorm can translate.
func IsDuplicate(db *gorm.DB, err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	if tr, ok := db.Dialector.(gorm.ErrorTranslator); ok {
		return errors.Is(tr.Translate(err), gorm.ErrDuplicatedKey)
	}
	return false
}

// DefaultPurgeBatch is the batch size of a purge asked for 0 rows per
// statement.
const DefaultPurgeBatch = 1000

// PurgeBefore deletes rows of table whose timeCol is before cutoff and that
// match where (optional), at most batch rows per statement, until none are
// left or ctx ends. Small batches keep each delete's locks short. pk names
// the column used to pick a batch; it must be unique.
//
// Each batch's keys are selected first, then deleted by a DELETE that
// repeats the age and where conditions: a row that changed in between
// (a dead outbox row requeued, a row whose time moved past the cutoff)
// no longer matches and is kept.
func PurgeBefore(ctx context.Context, db *gorm.DB, table, pk, timeCol string, cutoff time.Time, batch int, where ...clause.Expression) (int64, error) {
	if batch <= 0 {
		batch = DefaultPurgeBatch
	}
	match := func(q *gorm.DB) *gorm.DB {
		q = q.Where(clause.Lt{Column: clause.Column{Name: timeCol}, Value: cutoff})
		for _, w := range where {
			q = q.Where(w)
		}
		return q
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		// One transaction per batch: read/write splitting (gorm's
		// dbresolver, ProxySQL) sends a transaction to the primary, where
		// a plain read would go to a replica that may not have the rows
		// yet, and the purge would find nothing to delete.
		var keys []any
		var deleted int64
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			q := match(tx.Table(table))
			if err := q.Order(clause.OrderByColumn{Column: clause.Column{Name: pk}}).Limit(batch).Pluck(pk, &keys).Error; err != nil {
				return fmt.Errorf("select rows to purge from %s: %w", table, err)
			}
			if len(keys) == 0 {
				return nil
			}
			res := match(tx.Table(table)).
				Where(clause.IN{Column: clause.Column{Name: pk}, Values: keys}).
				Delete(map[string]any{})
			if res.Error != nil {
				return fmt.Errorf("purge %s: %w", table, res.Error)
			}
			deleted = res.RowsAffected
			return nil
		})
		if err != nil {
			return total, err
		}
		total += deleted
		if len(keys) < batch {
			return total, nil
		}
	}
}

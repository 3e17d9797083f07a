package outbox

import (
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/store"
)

// The relay's own reads and marks go as one literal query each where the
// handle allows it (store.LiteralsFor: gorm's MySQL dialector from a DSN,
// no PrepareStmt, no interpolateParams): with the driver's default a
// statement with arguments is a prepare and an execute, two round trips,
// and a claim cycle runs four or more of them while commits wait for it.
// Their values are integers, times and the status strings, written as the
// outbox INSERT writes them (internal/store). Elsewhere they run as gorm
// builds them.

// find runs build(db).Find(dest).
func find(db *gorm.DB, build func(*gorm.DB) *gorm.DB, dest any) error {
	if q, ok := store.Literal(db, func(dry *gorm.DB) *gorm.DB { return build(dry).Find(dest) }); ok {
		return db.Raw(q).Find(dest).Error
	}
	return build(db).Find(dest).Error
}

// updates runs build(db).Updates(set) and returns the rows it changed.
func updates(db *gorm.DB, build func(*gorm.DB) *gorm.DB, set map[string]any) (int64, error) {
	if q, ok := store.Literal(db, func(dry *gorm.DB) *gorm.DB { return build(dry).Updates(set) }); ok {
		res := db.Exec(q)
		return res.RowsAffected, res.Error
	}
	res := build(db).Updates(set)
	return res.RowsAffected, res.Error
}

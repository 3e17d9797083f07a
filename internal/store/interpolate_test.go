package store

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/internal/testbed"
)

type state string

// TestInterpolate writes each kind of value it takes and refuses the rest.
func TestInterpolate(t *testing.T) {
	loc := time.FixedZone("UTC+8", 8*3600)
	l := Literals{loc: loc}
	at := time.Date(2026, 12, 7, 1, 2, 3, 456789000, time.UTC)
	n := int64(7)
	var nilPtr *int64
	q, ok := l.Interpolate("SELECT `a?b` FROM t WHERE s = ? AND id IN (?,?) AND at < ? AND u = ? AND p = ? AND z = ? AND f = ? AND b = ? AND v = ?",
		[]any{state("pending"), 1, uint8(2), at, uint64(18446744073709551615), &n, nilPtr, true, []byte{0, 0x27}, sql.NullInt64{Int64: 9, Valid: true}})
	require.True(t, ok)
	require.Equal(t, "SELECT `a?b` FROM t WHERE s = X'70656e64696e67' AND id IN (1,2) AND at < '2026-12-07 09:02:03.456789'"+
		" AND u = 18446744073709551615 AND p = 7 AND z = NULL AND f = 1 AND b = X'0027' AND v = 9", q)

	for name, c := range map[string]struct {
		q    string
		vars []any
	}{
		"quoted string":       {"SELECT 1 FROM t WHERE k <> '' AND id = ?", []any{1}},
		"double quotes":       {`SELECT "?" FROM t WHERE id = ?`, []any{1}},
		"too few vars":        {"SELECT 1 FROM t WHERE a = ? AND b = ?", []any{1}},
		"too many vars":       {"SELECT 1 FROM t WHERE a = ?", []any{1, 2}},
		"a float":             {"SELECT 1 FROM t WHERE a = ?", []any{1.5}},
		"an expression":       {"SELECT 1 FROM t WHERE a = ?", []any{clause.Expr{SQL: "NOW()"}}},
		"unclosed identifier": {"SELECT `a FROM t WHERE a = ?", []any{1}},
		"a struct":            {"SELECT 1 FROM t WHERE a = ?", []any{struct{}{}}},
	} {
		_, ok := l.Interpolate(c.q, c.vars)
		require.False(t, ok, name)
	}
	_, ok = l.Interpolate("SELECT 1 FROM t WHERE b = ?", []any{make([]byte, MaxLiteralBytes)})
	require.False(t, ok, "over MaxLiteralBytes")
}

// TestLiteralRunsWhatGormBuilds runs the same reads and updates once as
// gorm builds them, with arguments, and once through Literal, against
// the database: the rows read and the rows changed must be the same.
func TestLiteralRunsWhatGormBuilds(t *testing.T) {
	db := testbed.DB(t)
	type item struct {
		ID    int64 `gorm:"primaryKey"`
		State string
		Key   string    `gorm:"column:key;size:64"`
		At    time.Time `gorm:"type:datetime(6)"`
	}
	table := "literal_items"
	require.NoError(t, db.Table(table).Migrator().DropTable(table))
	require.NoError(t, db.Table(table).AutoMigrate(&item{}))
	t.Cleanup(func() { _ = db.Migrator().DropTable(table) })
	base := time.Now().UTC().Truncate(time.Microsecond)
	var items []item
	for i := 1; i <= 20; i++ {
		items = append(items, item{ID: int64(i), State: []string{"pending", "sent"}[i%2], Key: []string{"", "k'1", "é"}[i%3], At: base.Add(time.Duration(i) * time.Second)})
	}
	require.NoError(t, db.Table(table).Create(&items).Error)

	reads := map[string]func(*gorm.DB) *gorm.DB{
		"in and time": func(q *gorm.DB) *gorm.DB {
			return q.Table(table).Where("state = ?", "pending").Where("id IN ?", []int{1, 2, 3, 4, 5, 6}).Where("at <= ?", base.Add(5*time.Second)).Order("id")
		},
		"row values": func(q *gorm.DB) *gorm.DB {
			return q.Table(table).Where("(id, at) IN ?", [][]any{{int64(3), base.Add(3 * time.Second)}, {int64(4), base}}).Order("id")
		},
		"strings": func(q *gorm.DB) *gorm.DB {
			return q.Table(table).Where("`key` IN ?", []string{"k'1", "é"}).Where("`key` <> ?", "").Order("id").Limit(5)
		},
		"locking": func(q *gorm.DB) *gorm.DB {
			return q.Table(table).Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked}).
				Where("state = ?", "sent").Order("id").Limit(3)
		},
	}
	for name, build := range reads {
		var want, got []item
		require.NoError(t, build(db).Find(&want).Error, name)
		q, ok := Literal(db, func(dry *gorm.DB) *gorm.DB { return build(dry).Find(&[]item{}) })
		require.True(t, ok, name)
		require.NotContains(t, q, "?", name)
		require.NoError(t, db.Raw(q).Find(&got).Error, name)
		require.NotEmpty(t, want, name)
		require.Equal(t, want, got, name)
	}

	// The same update, through arguments and as a literal, on two halves.
	set := map[string]any{"state": "parked", "at": gorm.Expr("DATE_ADD(at, INTERVAL ? MICROSECOND)", 1500)}
	upd := func(ids []int64) func(*gorm.DB) *gorm.DB {
		return func(q *gorm.DB) *gorm.DB { return q.Table(table).Where("id IN ?", ids).Where("state = ?", "pending") }
	}
	res := upd([]int64{2, 4, 5})(db).Updates(set)
	require.NoError(t, res.Error)
	require.EqualValues(t, 2, res.RowsAffected)
	q, ok := Literal(db, func(dry *gorm.DB) *gorm.DB { return upd([]int64{6, 8, 9})(dry).Updates(set) })
	require.True(t, ok)
	res = db.Exec(q)
	require.NoError(t, res.Error)
	require.EqualValues(t, 2, res.RowsAffected)
	var after []item
	require.NoError(t, db.Table(table).Where("state = ?", "parked").Order("id").Find(&after).Error)
	require.Len(t, after, 4)
	for i, id := range []int64{2, 4, 6, 8} {
		require.Equal(t, id, after[i].ID)
		require.Equal(t, base.Add(time.Duration(id)*time.Second+1500*time.Microsecond), after[i].At.UTC())
	}

	// Where literals are not taken, Literal says so.
	prepared := db.Session(&gorm.Session{PrepareStmt: true})
	_, ok = Literal(prepared, func(dry *gorm.DB) *gorm.DB { return reads["strings"](dry).Find(&[]item{}) })
	require.False(t, ok)
}

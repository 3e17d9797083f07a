package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/internal/testbed"
)

// item is a model with two identifier columns and one text column.
type item struct {
	Key  string `gorm:"primaryKey;type:varbinary(16);size:16;not null"`
	Name string `gorm:"type:varbinary(8);size:8;not null;default:''"`
	Note string `gorm:"size:64;not null;default:''"`
}

// oldItems is item's table as it was before its identifier columns were
// binary.
const oldItems = "CREATE TABLE items (`key` varchar(16) NOT NULL, name varchar(8) NOT NULL DEFAULT '', note varchar(64) NOT NULL DEFAULT '', PRIMARY KEY (`key`)) DEFAULT CHARSET=utf8mb4"

// statements records the SQL gorm runs.
type statements struct {
	logger.Interface
	mu  sync.Mutex
	sql []string
}

func (s *statements) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	s.mu.Lock()
	s.sql = append(s.sql, sql)
	s.mu.Unlock()
}

// alters returns the ALTER statements run since the last call.
func (s *statements) alters() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, q := range s.sql {
		if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(q)), "ALTER") {
			out = append(out, q)
		}
	}
	s.sql = nil
	return out
}

func columnType(t *testing.T, db *gorm.DB, table, column string) string {
	t.Helper()
	var typ string
	require.NoError(t, db.Raw(`SELECT column_type FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?`, table, column).Scan(&typ).Error)
	return typ
}

func TestMigrateConvertsIdentifierColumnsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &statements{Interface: logger.Discard}
	db := testbed.DB(t, testbed.ServerDefaults()).Session(&gorm.Session{Logger: rec})
	require.NoError(t, db.Exec(oldItems).Error)
	require.NoError(t, db.Exec("INSERT INTO items (`key`, name, note) VALUES ('Käse', 'Ab', 'é')").Error)
	err := db.Exec("INSERT INTO items (`key`) VALUES ('käse')").Error
	require.True(t, store.IsDuplicate(db, err), "the old table folds case: %v", err)
	rec.alters()

	converted, err := store.Migrate(ctx, db, "items", &item{})
	require.NoError(t, err)
	require.Equal(t, []string{"key", "name"}, converted)
	alters := rec.alters()
	require.Len(t, alters, 1, "one ALTER TABLE for all columns: %q", alters)
	require.Equal(t, "varbinary(16)", columnType(t, db, "items", "key"))
	require.Equal(t, "varbinary(8)", columnType(t, db, "items", "name"))
	require.Equal(t, "varchar(64)", columnType(t, db, "items", "note"), "text columns stay text")

	var got item
	require.NoError(t, db.Table("items").Take(&got).Error)
	require.Equal(t, item{Key: "Käse", Name: "Ab", Note: "é"}, got, "values are kept byte for byte")
	require.NoError(t, db.Exec("INSERT INTO items (`key`) VALUES ('käse')").Error, "keys now compare byte for byte")

	converted, err = store.Migrate(ctx, db, "items", &item{})
	require.NoError(t, err)
	require.Empty(t, converted)
	require.Empty(t, rec.alters(), "a second Migrate alters nothing")
}

// A value that takes more bytes than its binary column holds (a
// varchar(8) in utf8mb4 holds 8 characters, up to 32 bytes) stops the
// conversion before anything changes.
func TestMigrateRefusesValuesThatWouldNotFit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testbed.DB(t, testbed.ServerDefaults())
	require.NoError(t, db.Exec(oldItems).Error)
	long := strings.Repeat("é", 8) // 8 characters, 16 bytes
	require.NoError(t, db.Exec("INSERT INTO items (`key`, name) VALUES ('a', ?)", long).Error)

	converted, err := store.Migrate(ctx, db, "items", &item{})
	require.ErrorIs(t, err, store.ErrValueTooLong)
	require.ErrorContains(t, err, "name: 1 rows longer than 8 bytes")
	require.Empty(t, converted)
	require.Equal(t, "varchar(16)", columnType(t, db, "items", "key"), "nothing was changed")
	var name string
	require.NoError(t, db.Raw("SELECT name FROM items").Scan(&name).Error)
	require.Equal(t, long, name)
}

// On a database whose default character set is latin1 (MariaDB's own
// default before distributions set utf8mb4), Migrate still creates utf8mb4
// tables, as the shipped .sql files do.
func TestMigrateCreatesUTF8MB4Tables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testbed.DB(t, testbed.ServerDefaults())
	require.NoError(t, db.Exec("ALTER DATABASE CHARACTER SET latin1 COLLATE latin1_swedish_ci").Error)
	converted, err := store.Migrate(ctx, db, "items", &item{})
	require.NoError(t, err)
	require.Empty(t, converted)
	var charset string
	require.NoError(t, db.Raw(`SELECT character_set_name FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'items' AND column_name = 'note'`).Scan(&charset).Error)
	require.Equal(t, "utf8mb4", charset)
	require.NoError(t, db.Table("items").Create(&item{Key: "k", Note: "日本語"}).Error)
	var got item
	require.NoError(t, db.Table("items").Take(&got).Error)
	require.Equal(t, "日本語", got.Note)
}

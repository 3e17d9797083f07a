package checker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// A duplicate ID is told apart on the local transaction's own connection:
// with a pool of one connection, which that transaction holds, Begin still
// finds the committed row and answers ErrDuplicateID, never "rolled back".
func TestBeginDuplicateWithOneConnectionPool(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	db, err := testbed.Open(dsn)
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(context.Background()))
	id := txmsg.NewID()
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(context.Background(), tx, id) }))

	sqlDB.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, id) })
	require.NotErrorIs(t, err, txmsg.ErrRolledBackByCheck)
	require.ErrorIs(t, err, txmsg.ErrDuplicateID)
	require.NoError(t, ctx.Err(), "Begin waited for a second connection")
}

// When the existing barrier row cannot be read, Begin does not know whether
// the ID committed before: it answers ErrOutcomeUnknown, never
// ErrRolledBackByCheck (whose caller would retry with a new message and
// apply the business operation twice).
func TestBeginDuplicateUnreadableIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	proxy, db := testbed.ProxiedDB(t, dsn)
	chk, err := checker.New(db, checker.Config{ResolveTimeout: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(context.Background()))
	id := txmsg.NewID()
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(context.Background(), tx, id) }))

	// The database becomes unreachable between the refused insert and the
	// read of the row that refused it: Begin's only query through gorm's
	// row callbacks is that read.
	require.NoError(t, db.Callback().Row().Before("gorm:row").Register("test:cut", func(*gorm.DB) { proxy.Cut() }))
	tx := db.Begin()
	require.NoError(t, tx.Error)
	err = chk.Begin(context.Background(), tx, id)
	tx.Rollback()
	require.Error(t, err)
	require.NotErrorIs(t, err, txmsg.ErrRolledBackByCheck)
	require.NotErrorIs(t, err, txmsg.ErrDuplicateID)
	require.ErrorIs(t, err, txmsg.ErrOutcomeUnknown)
	require.ErrorContains(t, err, id)
}

// A handle whose DSN lacks parseTime=true is refused at construction,
// whether gorm knows the DSN or was given a *sql.DB; one with it is taken.
func TestNewRefusesDSNWithoutParseTime(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	for name, db := range testbed.WithoutParseTime(t, dsn) {
		_, err := checker.New(db, checker.Config{})
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, name)
		require.ErrorContains(t, err, "parseTime=true", name)
	}
	_, err := checker.New(testbed.OverConn(t, dsn), checker.Config{})
	require.NoError(t, err)
}

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

// Begin's duplicate insert is an answer, not an error for the caller's gorm
// logger; the caller's own failing statement in the same transaction, and a
// real failure of Begin, still are logged.
func TestBeginDuplicateNotLoggedAsError(t *testing.T) {
	t.Parallel()
	base := testbed.DB(t)
	db, rec := testbed.WithGormErrors(base)
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, chk.Migrate(ctx))
	id := txmsg.NewID()
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, id) }))
	err = db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, id) })
	require.ErrorIs(t, err, txmsg.ErrDuplicateID)
	_, err = chk.Resolve(ctx, txmsg.NewID())
	require.NoError(t, err)
	require.Empty(t, rec.All())

	// The caller's statement through the same transaction: logged.
	err = db.Transaction(func(tx *gorm.DB) error {
		return tx.Exec("INSERT INTO `"+chk.Table()+"` (tx_id, state, created_at) VALUES (?, 'committed', NOW())", id).Error
	})
	require.Error(t, err)
	require.Len(t, rec.Containing("Duplicate entry"), 1, rec.All())

	broken, err := checker.New(db, checker.Config{Table: "no_such_barrier"})
	require.NoError(t, err)
	err = db.Transaction(func(tx *gorm.DB) error { return broken.Begin(ctx, tx, txmsg.NewID()) })
	require.Error(t, err)
	require.Len(t, rec.Containing("no_such_barrier"), 1, rec.All())
}

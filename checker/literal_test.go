package checker_test

import (
	"context"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestLiteralAndArgumentPathsAgree: a barrier row written by Begin on a
// handle that sends literal SQL (the default DSN) is read by Resolve on a
// handle that sends arguments (interpolateParams=true), and the other way
// round, for IDs with quotes, backslashes and non-ASCII bytes.
func TestLiteralAndArgumentPathsAgree(t *testing.T) {
	t.Parallel()
	db, dsn := testbed.DBWithDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.InterpolateParams = true
	adb, err := testbed.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := adb.DB(); err == nil {
			_ = s.Close()
		}
	})
	lit, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, lit.Migrate(context.Background()))
	args, err := checker.New(adb, checker.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	for _, c := range []struct {
		name         string
		writer       *checker.Checker
		wdb          *gorm.DB
		reader       *checker.Checker
		committedID  string
		rolledBackID string
		neverBeganID string
	}{
		{"literal writes", lit, db, args, `it's-\-` + txmsg.NewID(), "rb'1-" + txmsg.NewID(), "é-" + txmsg.NewID()},
		{"arguments write", args, adb, lit, `it's-\-` + txmsg.NewID(), "rb'1-" + txmsg.NewID(), "é-" + txmsg.NewID()},
	} {
		require.NoError(t, c.wdb.Transaction(func(tx *gorm.DB) error { return c.writer.Begin(ctx, tx, c.committedID) }), c.name)
		_ = c.wdb.Transaction(func(tx *gorm.DB) error {
			require.NoError(t, c.writer.Begin(ctx, tx, c.rolledBackID), c.name)
			return gorm.ErrInvalidData
		})
		st, err := c.reader.Resolve(ctx, c.committedID)
		require.NoError(t, err, c.name)
		require.Equal(t, txmsg.StateCommitted, st, c.name)
		st, err = c.reader.Resolve(ctx, c.rolledBackID)
		require.NoError(t, err, c.name)
		require.Equal(t, txmsg.StateRolledBack, st, c.name)
		// The reader recorded rolled_back for the ID that never began: the
		// writer can no longer commit it, and sees the same answer.
		st, err = c.reader.Resolve(ctx, c.neverBeganID)
		require.NoError(t, err, c.name)
		require.Equal(t, txmsg.StateRolledBack, st, c.name)
		err = c.wdb.Transaction(func(tx *gorm.DB) error { return c.writer.Begin(ctx, tx, c.neverBeganID) })
		require.ErrorIs(t, err, txmsg.ErrRolledBackByCheck, c.name)
		// A repeated committed ID is a duplicate on either path.
		err = c.wdb.Transaction(func(tx *gorm.DB) error { return c.writer.Begin(ctx, tx, c.committedID) })
		require.ErrorIs(t, err, txmsg.ErrDuplicateID, c.name)
		got, err := c.writer.Lookup(ctx, c.committedID)
		require.NoError(t, err)
		require.Equal(t, checker.StateCommitted, got, c.name)
	}
}

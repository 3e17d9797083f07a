package checker_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
)

// barrier.sql, shipped for DBAs, must create what Migrate creates.
func TestBarrierSQLMatchesMigrate(t *testing.T) {
	t.Parallel()
	migrated, fromFile := testbed.DB(t), testbed.DB(t)
	chk, err := checker.New(migrated, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(context.Background()))
	testbed.ExecSQLFile(t, fromFile, "barrier.sql")
	require.Equal(t, testbed.Shape(t, migrated, checker.DefaultTable), testbed.Shape(t, fromFile, checker.DefaultTable))
	require.Equal(t, testbed.Shape(t, migrated, chk.HorizonTable()), testbed.Shape(t, fromFile, chk.HorizonTable()))
}

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

// splitChecker returns a checker on a handle with read/write splitting
// (testbed.ReadWriteSplit, as dbresolver or ProxySQL route) whose replica
// lags: a database of its own with the same tables and none of the
// primary's rows. It also returns the primary's handle.
func splitChecker(t *testing.T) (*checker.Checker, *testbed.Split, *gorm.DB) {
	t.Helper()
	primary, dsn := testbed.DBWithDSN(t)
	replica := testbed.DB(t)
	for _, db := range []*gorm.DB{primary, replica} {
		chk, err := checker.New(db, checker.Config{CheckWindow: time.Minute})
		require.NoError(t, err)
		require.NoError(t, chk.Migrate(context.Background()))
	}
	ps, err := primary.DB()
	require.NoError(t, err)
	rs, err := replica.DB()
	require.NoError(t, err)
	split := testbed.ReadWriteSplit(t, dsn, ps, rs)
	chk, err := checker.New(split.DB, checker.Config{CheckWindow: time.Minute})
	require.NoError(t, err)
	return chk, split, primary
}

// TestResolveReadsThePrimary: with read/write splitting, every read that
// decides a check-back's answer goes to the primary. A replica that lags
// has no row for a transaction that just committed; answered from it,
// the check-back stayed UNKNOWN for as long as the replica lagged, and a
// replica that had not yet applied a purge's horizon let Resolve write
// rolled_back for a committed transaction whose row was purged (ROLLBACK
// for a committed transaction).
func TestResolveReadsThePrimary(t *testing.T) {
	t.Parallel()
	chk, split, primary := splitChecker(t)
	ctx := context.Background()

	committed := txmsg.NewID()
	require.NoError(t, split.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, committed) }))
	state, err := chk.Resolve(ctx, committed)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateCommitted, state, "answered from the replica, which lags")
	got, err := chk.Lookup(ctx, committed)
	require.NoError(t, err)
	require.Equal(t, checker.StateCommitted, got)

	// A purge on the primary: its horizon is not on the replica yet.
	long := time.Now().Add(-3 * time.Hour)
	purged := idAt(long)
	require.NoError(t, primary.Table(chk.Table()).Create(&checker.Barrier{TxID: purged, State: checker.StateCommitted, CreatedAt: long.UTC()}).Error)
	n, err := chk.Purge(ctx, time.Hour, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	state, err = chk.Resolve(ctx, purged)
	require.ErrorIs(t, err, checker.ErrBeyondPurgeHorizon, "the horizon was read from the replica")
	require.Equal(t, txmsg.StateUnknown, state)

	// Reads that decide nothing may use the replica: the split is real.
	require.Positive(t, split.ToReplica.Load())
}

// TestCheckerPingReachesThePrimary: the sweeper's probe of the barrier's
// database goes to the primary, so a primary that is down is seen as down
// while a replica answers.
func TestCheckerPingReachesThePrimary(t *testing.T) {
	t.Parallel()
	db, dsn := testbed.DBWithDSN(t)
	migrated, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, migrated.Migrate(context.Background()))
	proxy, split := testbed.ProxiedSplit(t, dsn)
	chk, err := checker.New(split.DB, checker.Config{})
	require.NoError(t, err)

	require.NoError(t, chk.Ping(context.Background()))
	proxy.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Error(t, chk.Ping(ctx), "the primary is down; the replica must not answer for it")
	proxy.Restore()
}

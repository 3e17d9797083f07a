package checker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func newChecker(t *testing.T, cfg checker.Config) (*checker.Checker, *gorm.DB) {
	t.Helper()
	db := testbed.DB(t)
	chk, err := checker.New(db, cfg)
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(context.Background()))
	return chk, db
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := checker.New(nil, checker.Config{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	db := &gorm.DB{}
	_, err = checker.New(db, checker.Config{Table: "bad-name; drop"})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	_, err = checker.New(db, checker.Config{ResolveTimeout: -time.Second})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.Equal(t, checker.DefaultCheckWindow, chk.CheckWindow())
	chk, err = checker.New(db, checker.Config{CheckWindow: time.Minute})
	require.NoError(t, err)
	require.Equal(t, time.Minute, chk.CheckWindow())
}

func TestResolveCommitted(t *testing.T) {
	t.Parallel()
	chk, db := newChecker(t, checker.Config{})
	ctx := context.Background()
	id := txmsg.NewID()
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, id) }))

	state, err := chk.Resolve(ctx, id)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateCommitted, state)
	// A second check-back gives the same answer.
	state, err = chk.Resolve(ctx, id)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateCommitted, state)
}

func TestResolveRolledBackLocalTx(t *testing.T) {
	t.Parallel()
	chk, db := newChecker(t, checker.Config{})
	ctx := context.Background()
	id := txmsg.NewID()
	boom := errors.New("business rule failed")
	err := db.Transaction(func(tx *gorm.DB) error {
		require.NoError(t, chk.Begin(ctx, tx, id))
		return boom
	})
	require.ErrorIs(t, err, boom)

	state, err := chk.Resolve(ctx, id)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)
	got, err := chk.Lookup(ctx, id)
	require.NoError(t, err)
	require.Equal(t, checker.StateRolledBack, got)
}

func TestResolveNeverStartedThenBeginFails(t *testing.T) {
	t.Parallel()
	chk, db := newChecker(t, checker.Config{})
	ctx := context.Background()
	id := txmsg.NewID()

	state, err := chk.Resolve(ctx, id)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)

	// The local transaction arrives late: it must not commit.
	err = db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, id) })
	require.ErrorIs(t, err, txmsg.ErrRolledBackByCheck)
	got, err := chk.Lookup(ctx, id)
	require.NoError(t, err)
	require.Equal(t, checker.StateRolledBack, got)
}

func TestBeginDuplicateCommittedID(t *testing.T) {
	t.Parallel()
	chk, db := newChecker(t, checker.Config{})
	ctx := context.Background()
	id := txmsg.NewID()
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, id) }))
	err := db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, id) })
	require.ErrorIs(t, err, txmsg.ErrDuplicateID)
}

// A check-back that arrives while the local transaction is still open waits
// for its outcome instead of guessing.
func TestResolveWaitsForRunningLocalTx(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		chk, db := newChecker(t, checker.Config{ResolveTimeout: 20 * time.Second})
		ctx := context.Background()
		id := txmsg.NewID()
		tx := db.Begin()
		require.NoError(t, tx.Error)
		require.NoError(t, chk.Begin(ctx, tx, id))

		answer := make(chan txmsg.LocalState, 1)
		go func() {
			state, err := chk.Resolve(ctx, id)
			if err != nil {
				state = txmsg.StateUnknown
			}
			answer <- state
		}()
		select {
		case s := <-answer:
			t.Fatalf("Resolve answered %v while the local transaction was open", s)
		case <-time.After(300 * time.Millisecond):
		}
		want := txmsg.StateRolledBack
		if commit {
			require.NoError(t, tx.Commit().Error)
			want = txmsg.StateCommitted
		} else {
			require.NoError(t, tx.Rollback().Error)
		}
		require.Equal(t, want, <-answer, "commit=%v", commit)
	}
}

// When the database does not answer, the check-back answer is UNKNOWN with
// an error, never COMMIT or ROLLBACK.
func TestResolveUnknownWhenDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	base, db := testbed.ProxiedDB(t, dsn)
	chk, err := checker.New(db, checker.Config{ResolveTimeout: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(context.Background()))
	id := txmsg.NewID()
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(context.Background(), tx, id) }))

	base.Cut()
	state, err := chk.Resolve(context.Background(), id)
	require.Error(t, err)
	require.Equal(t, txmsg.StateUnknown, state)

	base.Restore()
	require.Eventually(t, func() bool {
		state, err = chk.Resolve(context.Background(), id)
		return err == nil
	}, 20*time.Second, 100*time.Millisecond)
	require.Equal(t, txmsg.StateCommitted, state)
}

func TestPurgeRefusesCheckWindowAndDeletesOldRows(t *testing.T) {
	t.Parallel()
	chk, db := newChecker(t, checker.Config{CheckWindow: time.Minute})
	ctx := context.Background()
	_, err := chk.Purge(ctx, 30*time.Second, 10)
	require.ErrorIs(t, err, checker.ErrCutoffInWindow)

	old := time.Now().UTC().Add(-2 * time.Hour)
	for i := 0; i < 25; i++ {
		require.NoError(t, db.Table(chk.Table()).Create(&checker.Barrier{TxID: txmsg.NewID(), State: checker.StateCommitted, CreatedAt: old}).Error)
	}
	fresh := txmsg.NewID()
	_, err = chk.Resolve(ctx, fresh)
	require.NoError(t, err)

	n, err := chk.Purge(ctx, time.Hour, 10)
	require.NoError(t, err)
	require.EqualValues(t, 25, n)
	counts, err := chk.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{checker.StateCommitted: 0, checker.StateRolledBack: 1}, counts)
}

// IDs that differ only in case are different transactions, whatever the
// database's default collation: the barrier compares tx_id byte for byte.
func TestIDsDifferingInCaseAreDistinct(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t, testbed.ServerDefaults())
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, chk.Migrate(ctx))
	upper := "Order-" + testbed.Suffix()
	lower := strings.ToLower(upper)

	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, upper) }))
	// A check-back for an ID never begun is ROLLBACK, even when an ID
	// differing only in case committed.
	state, err := chk.Resolve(ctx, strings.ToUpper(upper))
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)
	// A caller-chosen ID differing only in case is not a duplicate.
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, lower) }))

	for id, want := range map[string]string{upper: checker.StateCommitted, lower: checker.StateCommitted, strings.ToUpper(upper): checker.StateRolledBack} {
		got, err := chk.Lookup(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
	counts, err := chk.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{checker.StateCommitted: 2, checker.StateRolledBack: 1}, counts)
}

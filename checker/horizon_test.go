package checker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// idAt returns a UUIDv7 txmsg ID minted at t.
func idAt(t time.Time) string {
	var r [10]byte
	_, _ = rand.Read(r[:])
	ms := t.UnixMilli()
	return fmt.Sprintf("%08x-%04x-7%s-%x%s-%s", uint64(ms)>>16, uint64(ms)&0xffff,
		hex.EncodeToString(r[0:2])[1:], 8|r[2]&3, hex.EncodeToString(r[3:4])+hex.EncodeToString(r[4:5])[1:], hex.EncodeToString(r[4:10]))
}

func TestIDAtIsAUUIDv7(t *testing.T) {
	at := time.Now().Add(-3 * time.Hour).Truncate(time.Millisecond)
	got, ok := txmsg.IDTime(idAt(at))
	require.True(t, ok)
	require.True(t, at.Equal(got), "%v != %v", at, got)
}

// withSession opens dsn's database again with extra session variables.
func withSession(t *testing.T, dsn string, vars map[string]string) *gorm.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	for k, v := range vars {
		cfg.Params[k] = v
	}
	db, err := testbed.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	})
	return db
}

// A checker whose session runs at READ UNCOMMITTED must not answer COMMIT
// from another transaction's uncommitted barrier row: that transaction may
// still roll back, and the event would be a phantom. While the row is
// uncommitted the answer is UNKNOWN (here: the session's 1 s lock wait
// ends), and after the rollback it is ROLLBACK.
func TestResolveAtReadUncommittedIgnoresUncommittedRows(t *testing.T) {
	t.Parallel()
	db, dsn := testbed.DBWithDSN(t)
	ru := withSession(t, dsn, map[string]string{"tx_isolation": "'READ-UNCOMMITTED'", "innodb_lock_wait_timeout": "1"})
	var level string
	require.NoError(t, ru.Raw("SELECT @@tx_isolation").Scan(&level).Error)
	require.Equal(t, "READ-UNCOMMITTED", level, "the DSN did not set the session's isolation")
	chk, err := checker.New(ru, checker.Config{ResolveTimeout: 30 * time.Second})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(context.Background()))

	ctx := context.Background()
	id := txmsg.NewID()
	local := db.Begin()
	require.NoError(t, local.Error)
	t.Cleanup(func() { local.Rollback() }) // before the database is dropped
	require.NoError(t, chk.Begin(ctx, local, id))

	state, err := chk.Resolve(ctx, id)
	require.Equal(t, txmsg.StateUnknown, state, "answered from an uncommitted row")
	require.Error(t, err)

	require.NoError(t, local.Rollback().Error)
	state, err = chk.Resolve(ctx, id)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)
}

// After a purge, a check-back for a transaction older than the purge cutoff
// has lost its evidence: the answer is UNKNOWN, never ROLLBACK, and no
// rolled_back row is written.
func TestResolveBeyondThePurgeHorizonIsUnknown(t *testing.T) {
	t.Parallel()
	chk, db := newChecker(t, checker.Config{CheckWindow: time.Minute})
	ctx := context.Background()
	long := time.Now().Add(-3 * time.Hour)
	committedLongAgo := idAt(long)
	require.NoError(t, db.Table(chk.Table()).Create(&checker.Barrier{TxID: committedLongAgo, State: checker.StateCommitted, CreatedAt: long.UTC()}).Error)
	named := "order-42" // a caller-chosen ID that is no UUIDv7

	// Before any purge a missing row means the transaction never committed.
	state, err := chk.Resolve(ctx, named)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)

	n, err := chk.Purge(ctx, time.Hour, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	state, err = chk.Resolve(ctx, committedLongAgo)
	require.ErrorIs(t, err, checker.ErrBeyondPurgeHorizon)
	require.Equal(t, txmsg.StateUnknown, state, "a purged committed transaction was answered %v", state)
	got, err := chk.Lookup(ctx, committedLongAgo)
	require.NoError(t, err)
	require.Empty(t, got, "nothing may be written for a transaction beyond the horizon")

	// The half message's born time decides for IDs without a time.
	state, err = chk.ResolveSince(ctx, "order-43", long)
	require.ErrorIs(t, err, checker.ErrBeyondPurgeHorizon)
	require.Equal(t, txmsg.StateUnknown, state)
	state, err = chk.Resolve(ctx, "order-44")
	require.ErrorIs(t, err, checker.ErrBeyondPurgeHorizon, "no time at all: it may be older than the cutoff")
	require.Equal(t, txmsg.StateUnknown, state)
	state, err = chk.ResolveSince(ctx, "order-45", time.Now())
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)

	// Young transactions are answered as before.
	fresh := txmsg.NewID()
	state, err = chk.Resolve(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)
	err = db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, fresh) })
	require.ErrorIs(t, err, txmsg.ErrRolledBackByCheck)
}

func TestCheckSameDatabase(t *testing.T) {
	t.Parallel()
	chk, db := newChecker(t, checker.Config{})
	ctx := context.Background()
	require.NoError(t, chk.CheckSameDatabase(ctx, db))
	err := chk.CheckSameDatabase(ctx, testbed.DB(t))
	require.ErrorIs(t, err, checker.ErrOtherDatabase)
}

package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// preparedCount reads the server-wide number of prepared statements.
func preparedCount(t *testing.T, db *gorm.DB) int {
	t.Helper()
	var row struct {
		VariableName string `gorm:"column:Variable_name"`
		Value        int    `gorm:"column:Value"`
	}
	require.NoError(t, db.Raw("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'").Scan(&row).Error)
	return row.Value
}

// TestPrepareStmtDoesNotCacheOneStatementPerID: with gorm's PrepareStmt,
// every statement text is prepared once and kept. txmsg's literal
// statements differ per ID, so each operation used to leave prepared
// statements behind on the server until the server-wide
// max_prepared_stmt_count (16,382 by default) was reached and every
// prepared statement on it failed, other applications' too. On such a
// handle txmsg sends arguments instead: a handful of statements, however
// many operations.
func TestPrepareStmtDoesNotCacheOneStatementPerID(t *testing.T) {
	_, dsn := testbed.DBWithDSN(t)
	db, err := gorm.Open(gmysql.Open(dsn), &gorm.Config{PrepareStmt: true, Logger: logger.Discard})
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	})
	ctx := context.Background()
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	box, err := outbox.New(db, outbox.Config{})
	require.NoError(t, err)
	require.NoError(t, box.Migrate(ctx))

	const ops = 300
	before := preparedCount(t, db)
	for i := range ops {
		id := txmsg.NewID()
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
			if err := chk.Begin(ctx, tx, id); err != nil {
				return err
			}
			msg := &txmsg.Message{ID: id, Topic: "t", Body: []byte(fmt.Sprint(i))}
			return box.EnqueueTx(ctx, tx, msg)
		}))
		_, err := chk.Resolve(ctx, txmsg.NewID()) // an unknown ID: the insert path of Resolve
		require.NoError(t, err)
	}
	grew := preparedCount(t, db) - before
	// Other tests prepare and close statements meanwhile; txmsg's own must
	// not grow with the number of operations (it was 3 per operation).
	require.Less(t, grew, ops/3, "prepared statements grew by %d over %d operations", grew, ops)
}

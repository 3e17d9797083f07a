package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// allTables are the tables "txmsgctl migrate" manages by default.
var allTables = []string{"txmsg_barrier", "txmsg_inbox", "txmsg_dead_letter", "txmsg_outbox", "txmsg_outbox_lease", "txmsg_outbox_relay"}

// binaryColumns are the identifier columns that compare byte for byte.
var binaryColumns = []string{
	"txmsg_barrier.tx_id",
	"txmsg_dead_letter.broker_message_id", "txmsg_dead_letter.consumer_group", "txmsg_dead_letter.msg_id", "txmsg_dead_letter.topic",
	"txmsg_inbox.consumer_group", "txmsg_inbox.msg_id", "txmsg_inbox.topic",
	"txmsg_outbox.keys", "txmsg_outbox.msg_id", "txmsg_outbox.sharding_key", "txmsg_outbox.tag", "txmsg_outbox.topic",
	"txmsg_outbox_lease.owner", "txmsg_outbox_lease.wanted_by",
}

// snapshot is every row of the txmsg tables, as text, in key order.
func snapshot(t *testing.T, db *gorm.DB) map[string][]string {
	t.Helper()
	queries := map[string]string{
		"txmsg_barrier":      "SELECT CONCAT_WS('|', tx_id, state, created_at) FROM txmsg_barrier ORDER BY tx_id",
		"txmsg_inbox":        "SELECT CONCAT_WS('|', id, consumer_group, msg_id, topic, handled_at) FROM txmsg_inbox ORDER BY id",
		"txmsg_dead_letter":  "SELECT CONCAT_WS('|', id, consumer_group, msg_id, broker_message_id, topic, tag, `keys`, properties, HEX(body), error, attempt, parked_at) FROM txmsg_dead_letter ORDER BY id",
		"txmsg_outbox":       "SELECT CONCAT_WS('|', id, msg_id, topic, tag, `keys`, sharding_key, bucket, HEX(body), properties, status, attempts, created_at) FROM txmsg_outbox ORDER BY id",
		"txmsg_outbox_lease": "SELECT CONCAT_WS('|', bucket, owner, expires_at, wanted_by) FROM txmsg_outbox_lease ORDER BY bucket",
	}
	out := map[string][]string{}
	for table, q := range queries {
		var rows []string
		require.NoError(t, db.Raw(q).Scan(&rows).Error, table)
		out[table] = rows
	}
	return out
}

// TestMigrateConvertsOldTables: tables created with the DDL of releases
// whose identifier columns were varchar, on a database with the server's
// default (case-insensitive) collation, hold rows. "txmsgctl migrate"
// converts the columns in place, keeps every row, leaves the tables as a
// fresh migrate makes them, and does nothing the second time.
func TestMigrateConvertsOldTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t, testbed.ServerDefaults())
	vars := map[string]string{"TXMSG_DSN": dsn}
	testbed.ExecSQLFile(t, db, "testdata/old_tables.sql")

	quiet := slog.New(slog.DiscardHandler)
	chk, err := checker.New(db, checker.Config{Logger: quiet})
	require.NoError(t, err)
	ob, err := outbox.New(db, outbox.Config{Logger: quiet})
	require.NoError(t, err)
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Logger: quiet})
	require.NoError(t, err)
	noop := func(context.Context, *gorm.DB) error { return nil }

	upper := "Order-" + testbed.Suffix()
	lower := strings.ToLower(upper)
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, upper) }))
	_, err = ob.Transact(ctx, &txmsg.Message{ID: upper, Topic: "Orders", Tag: "Created", Keys: []string{"Käse-1"}, ShardingKey: "Cust-1", Body: []byte{0, 1, 0xff}}, noop)
	require.NoError(t, err)
	_, err = driver.Run(inbox, ctx, "Inventory", "Orders", upper, noop)
	require.NoError(t, err)
	rec := &txmsg.Received{Message: &txmsg.Message{ID: upper, Topic: "Orders", Tag: "Created", Body: []byte("\x00not json")}, BrokerMessageID: "AC11-" + upper, Attempt: 2}
	require.NoError(t, driver.Park(inbox, ctx, "Inventory", rec, txmsg.ErrDecode))
	require.NoError(t, db.Exec("INSERT INTO txmsg_outbox_lease (bucket, owner, expires_at, wanted_by, wanted_at) VALUES (0, 'Relay-A', ?, 'relay-b', ?)",
		time.Now().UTC(), time.Now().UTC()).Error)
	// The old tables fold case: this is what migrate must repair.
	err = db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, lower) })
	require.ErrorIs(t, err, txmsg.ErrDuplicateID, "the old tables compare IDs without case")
	before := snapshot(t, db)

	r := ctl(t, vars, "migrate")
	require.Equal(t, exitOK, r.code, r)
	for _, c := range binaryColumns {
		require.Regexp(t, `(?m)^\s+`+c+`: converted to varbinary\(\d+\)`, r.stdout)
	}
	require.Equal(t, len(binaryColumns), strings.Count(r.stdout, "converted to"), r.stdout)
	require.Equal(t, before, snapshot(t, db), "migrate keeps every row and value")

	fresh, freshDSN := testbed.DBWithDSN(t, testbed.ServerDefaults())
	rf := ctl(t, map[string]string{"TXMSG_DSN": freshDSN}, "migrate")
	require.Equal(t, exitOK, rf.code, rf)
	require.NotContains(t, rf.stdout, "converted", "new tables are created binary")
	for _, table := range allTables {
		require.Equal(t, testbed.Shape(t, fresh, table), testbed.Shape(t, db, table), "%s: converted tables are what a fresh migrate makes", table)
	}

	r = ctl(t, vars, "migrate")
	require.Equal(t, exitOK, r.code, r)
	require.NotContains(t, r.stdout, "converted", "a second migrate changes nothing")
	require.Equal(t, before, snapshot(t, db))

	// IDs that differ only in case are now distinct everywhere.
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, lower) }))
	state, err := chk.Resolve(ctx, strings.ToUpper(upper))
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)
	_, err = ob.Transact(ctx, &txmsg.Message{ID: lower, Topic: "Orders", Body: []byte("x")}, noop)
	require.NoError(t, err)
	o, err := driver.Run(inbox, ctx, "Inventory", "Orders", lower, noop)
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeHandled, o)
	o, err = driver.Run(inbox, ctx, "inventory", "Orders", upper, noop)
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeHandled, o, "consumer groups compare byte for byte too")
	o, err = driver.Run(inbox, ctx, "Inventory", "Orders", upper, noop)
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeDuplicate, o)
}

// docs/upgrade-binary-ids.sql, the upgrade for DBAs, leaves old tables as
// "txmsgctl migrate" makes them.
func TestUpgradeSQLMatchesMigrate(t *testing.T) {
	t.Parallel()
	old := testbed.DB(t, testbed.ServerDefaults())
	testbed.ExecSQLFile(t, old, "testdata/old_tables.sql")
	testbed.ExecSQLFile(t, old, "../../docs/upgrade-binary-ids.sql")
	fresh, dsn := testbed.DBWithDSN(t, testbed.ServerDefaults())
	r := ctl(t, map[string]string{"TXMSG_DSN": dsn}, "migrate")
	require.Equal(t, exitOK, r.code, r)
	for _, table := range allTables {
		require.Equal(t, testbed.Shape(t, fresh, table), testbed.Shape(t, old, table), table)
	}
}

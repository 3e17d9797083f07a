package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// clientLogs receives everything rocketmq-client-go logs in this test
// binary, at every level, so the redaction test can search it.
var clientLogs = &lockedBuffer{}

// TestMain installs the client's log bridge before any client starts:
// the client's logger is process-wide and can be set only once.
func TestMain(m *testing.M) {
	testbed.QuietClientLogs()
	rmqlog.Install(slog.New(slog.NewTextHandler(clientLogs, &slog.HandlerOptions{Level: slog.LevelDebug})), slog.LevelDebug)
	os.Exit(m.Run())
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// result is one txmsgctl run.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs txmsgctl with args and environment vars.
func ctl(t *testing.T, vars map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errOut, func(k string) string { return vars[k] })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// backdate moves a time column of the rows matching where into the past.
func backdate(t *testing.T, db *gorm.DB, table, column string, by time.Duration, where string, args ...any) {
	t.Helper()
	res := db.Exec("UPDATE `"+table+"` SET `"+column+"` = ? WHERE "+where, append([]any{time.Now().UTC().Add(-by)}, args...)...)
	require.NoError(t, res.Error)
	require.Positive(t, res.RowsAffected)
}

func count(t *testing.T, db *gorm.DB, table, where string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Table(table).Where(where, args...).Count(&n).Error)
	return n
}

// TestAdminEndToEnd creates the tables with migrate, fills them through
// the components, and then drives stats, parked list/show/requeue/purge and
// purge against the real database.
func TestAdminEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t)
	vars := map[string]string{"TXMSG_DSN": dsn}

	r := ctl(t, vars, "stats")
	require.Equal(t, exitError, r.code, r)
	require.Contains(t, r.stderr, `txmsgctl migrate`, "a database without tables says how to create them")

	r = ctl(t, vars, "migrate")
	require.Equal(t, exitOK, r.code, r)
	for _, table := range []string{"txmsg_barrier", "txmsg_inbox", "txmsg_dead_letter", "txmsg_outbox", "txmsg_outbox_lease", "txmsg_outbox_relay"} {
		require.True(t, db.Migrator().HasTable(table), table)
		require.Contains(t, r.stdout, table)
	}
	r = ctl(t, vars, "migrate", "-only", "outbox", "-outbox-table", "orders_outbox")
	require.Equal(t, exitOK, r.code, r)
	require.True(t, db.Migrator().HasTable("orders_outbox"))
	require.True(t, db.Migrator().HasTable("orders_outbox_lease"))
	require.True(t, db.Migrator().HasTable("orders_outbox_relay"))
	require.Equal(t, testbed.Shape(t, db, "txmsg_outbox").Columns, testbed.Shape(t, db, "orders_outbox").Columns)
	r = ctl(t, vars, "migrate", "-only", "queue")
	require.Equal(t, exitUsage, r.code, r)

	// Outbox: two pending, one parked, one sent two days ago.
	ob, err := outbox.New(db, outbox.Config{})
	require.NoError(t, err)
	noop := func(context.Context, *gorm.DB) error { return nil }
	ids := make([]string, 4)
	for i := range ids {
		rc, err := ob.Transact(ctx, &txmsg.Message{Topic: "orders", Body: []byte(`{"order":` + string(rune('1'+i)) + `}`)}, noop)
		require.NoError(t, err)
		ids[i] = rc.ID
	}
	deadID, sentID := ids[2], ids[3]
	require.NoError(t, db.Exec("UPDATE txmsg_outbox SET status = 'dead', attempts = 20, last_error = 'broker said no' WHERE msg_id = ?", deadID).Error)
	require.NoError(t, db.Exec("UPDATE txmsg_outbox SET status = 'sent', sent_at = ? WHERE msg_id = ?", time.Now().UTC(), sentID).Error)
	backdate(t, db, "txmsg_outbox", "updated_at", 48*time.Hour, "msg_id = ?", sentID)
	backdate(t, db, "txmsg_outbox", "created_at", time.Minute, "msg_id = ?", ids[0])

	// Barrier: one committed two days ago, one rolled back by a check.
	chk, err := checker.New(db, checker.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, "tx-committed") }))
	state, err := chk.Resolve(ctx, "tx-unknown")
	require.NoError(t, err)
	require.Equal(t, txmsg.StateRolledBack, state)
	backdate(t, db, "txmsg_barrier", "created_at", 48*time.Hour, "tx_id = ?", "tx-committed")

	// Inbox: two handled by "inventory", one of them four days ago; two
	// parked, one of them two days ago.
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	for _, id := range []string{"in-1", "in-2"} {
		_, err := driver.Run(inbox, ctx, "inventory", "orders", id, func(context.Context, *gorm.DB) error { return nil })
		require.NoError(t, err)
	}
	backdate(t, db, "txmsg_inbox", "handled_at", 96*time.Hour, "msg_id = ?", "in-1")
	for _, id := range []string{"parked-1", "parked-2"} {
		rec := &txmsg.Received{Message: &txmsg.Message{ID: id, Topic: "orders", Body: []byte("\x00not json"), Properties: map[string]string{"origin": "test"}}, Attempt: 1}
		require.NoError(t, driver.Park(inbox, ctx, "inventory", rec, txmsg.ErrDecode))
	}
	backdate(t, db, "txmsg_dead_letter", "parked_at", 48*time.Hour, "msg_id = ?", "parked-2")

	r = ctl(t, vars, "stats", "-json")
	require.Equal(t, exitOK, r.code, r)
	var rep statsReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.True(t, rep.Outbox.Present)
	require.EqualValues(t, 2, rep.Outbox.Pending)
	require.EqualValues(t, 1, rep.Outbox.Sent)
	require.EqualValues(t, 1, rep.Outbox.Parked)
	require.GreaterOrEqual(t, rep.Outbox.OldestPendingSeconds, 59.0)
	require.Equal(t, barrierStats{Table: "txmsg_barrier", Present: true, Committed: 1, RolledBack: 1}, rep.Barrier)
	require.Equal(t, groupCounts{Table: "txmsg_inbox", Present: true, Rows: 2, Groups: map[string]int64{"inventory": 2}}, rep.Inbox)
	require.EqualValues(t, 2, rep.Parked.Rows)
	require.NotContains(t, rep.Database, "txmsg:txmsg@", "the password is masked")

	r = ctl(t, vars, "stats")
	require.Equal(t, exitOK, r.code, r)
	for _, want := range []string{"pending", "oldest 1m", "rolled_back", "group inventory", "parked"} {
		require.Contains(t, r.stdout, want)
	}

	// Parked outbox rows.
	r = ctl(t, vars, "dead", "list", "-kind", "outbox") // the name of earlier releases
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, deadID)
	require.Contains(t, r.stdout, "broker said no")
	require.NotContains(t, r.stdout, ids[0])

	r = ctl(t, vars, "parked", "show", deadID, "-kind", "outbox")
	require.Equal(t, exitOK, r.code, r)
	require.Regexp(t, `(?m)^status\s+parked$`, r.stdout)
	require.Contains(t, r.stdout, `{"order":3}`)

	r = ctl(t, vars, "parked", "show", "-kind", "outbox", "no-such-id")
	require.Equal(t, exitError, r.code, r)
	require.Contains(t, r.stderr, "not found: no-such-id")

	r = ctl(t, vars, "parked", "requeue", "-kind", "outbox", deadID)
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "requeued 1 parked row")
	require.EqualValues(t, 1, count(t, db, "txmsg_outbox", "msg_id = ? AND status = 'pending' AND attempts = 0", deadID))
	r = ctl(t, vars, "parked", "requeue", "-kind", "outbox", "no-such-id")
	require.Equal(t, exitError, r.code, r)
	require.Contains(t, r.stderr, "no-such-id (not found)")

	require.NoError(t, db.Exec("UPDATE txmsg_outbox SET status = 'dead' WHERE msg_id = ?", deadID).Error)
	r = ctl(t, vars, "parked", "purge", "-kind", "outbox")
	require.Equal(t, exitUsage, r.code, "purging needs IDs or an age")
	r = ctl(t, vars, "parked", "purge", "-kind", "outbox", deadID)
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "deleted 1 parked row(s)")
	require.Zero(t, count(t, db, "txmsg_outbox", "msg_id = ?", deadID))

	// Parked messages.
	r = ctl(t, vars, "parked", "list", "-kind", "consumer", "-group", "inventory")
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "parked-1")
	require.Contains(t, r.stdout, "parked-2")
	r = ctl(t, vars, "parked", "show", "-kind", "consumer", "parked-1")
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "base64")
	require.Contains(t, r.stdout, `"origin":"test"`)
	r = ctl(t, vars, "parked", "purge", "-kind", "consumer", "-older-than", "24h")
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "deleted 1 parked message(s)")
	require.Zero(t, count(t, db, "txmsg_dead_letter", "msg_id = ?", "parked-2"))
	r = ctl(t, vars, "parked", "purge", "-kind", "consumer", "parked-1", "-group", "inventory")
	require.Equal(t, exitOK, r.code, r)
	require.Zero(t, count(t, db, "txmsg_dead_letter", "1 = 1"))

	// Retention.
	r = ctl(t, vars, "purge", "-inbox-older-than", "1h")
	require.Equal(t, exitUsage, r.code, r)
	r = ctl(t, vars, "purge", "-barrier-older-than", "10m")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "check window")
	r = ctl(t, vars, "purge")
	require.Equal(t, exitOK, r.code, r)
	require.Regexp(t, `sent outbox rows\s+txmsg_outbox: deleted 1 `, r.stdout)
	require.Regexp(t, `barrier rows\s+txmsg_barrier: deleted 1 `, r.stdout)
	require.Regexp(t, `inbox rows\s+txmsg_inbox: deleted 1 `, r.stdout)
	require.Zero(t, count(t, db, "txmsg_outbox", "msg_id = ?", sentID))
	require.EqualValues(t, 2, count(t, db, "txmsg_outbox", "status = 'pending'"), "pending rows stay")
	require.EqualValues(t, 1, count(t, db, "txmsg_barrier", "1 = 1"))
	require.EqualValues(t, 1, count(t, db, "txmsg_inbox", "msg_id = ?", "in-2"))
}

// TestBadCommandLines checks the errors of command lines that cannot work,
// without a database.
func TestBadCommandLines(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no command":      {nil, "no command"},
		"unknown":         {[]string{"frobnicate"}, `unknown command "frobnicate"`},
		"no dsn":          {[]string{"stats"}, "pass -dsn or set TXMSG_DSN"},
		"parked alone":    {[]string{"parked"}, "list, show, requeue or purge"},
		"dead alone":      {[]string{"dead"}, "list, show, requeue or purge"},
		"no kind":         {[]string{"parked", "list", "-dsn", "u:p@tcp(h:1)/d"}, "-kind is required"},
		"bad kind":        {[]string{"parked", "list", "-kind", "broker"}, `-kind "broker"`},
		"show without id": {[]string{"parked", "show", "-kind", "outbox"}, "needs the txmsg IDs"},
		"no database":     {[]string{"stats", "-dsn", "u:p@tcp(127.0.0.1:3306)/"}, "names no database"},
		"consumer no ns":  {[]string{"parked", "requeue", "-kind", "consumer", "x", "-dsn", "u:p@tcp(h:1)/d"}, "-namesrv"},
	} {
		t.Run(name, func(t *testing.T) {
			r := ctl(t, nil, tc.args...)
			require.Equal(t, exitUsage, r.code, r)
			require.Contains(t, r.stderr, tc.want)
		})
	}
	r := ctl(t, nil, "help")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, "txmsgctl parked requeue")
}

// TestParkedRequeueConsumerRepublishes parks a message, then requeues it
// through the real broker: the group's (fixed) consumer handles it once,
// with its txmsg ID, and the parked row is gone.
func TestParkedRequeueConsumerRepublishes(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t)
	topic := testbed.Topic(t)
	group := testbed.Name(t, "cg")
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	id := txmsg.NewID()
	rec := &txmsg.Received{Message: &txmsg.Message{ID: id, Topic: topic, Tag: "created", Body: []byte(`{"n":5}`), Properties: map[string]string{"origin": "test"}}, Attempt: 1}
	require.NoError(t, driver.Park(inbox, ctx, group, rec, txmsg.ErrDecode))

	type event struct{ N int }
	var mu sync.Mutex
	var got []txmsg.Delivery[event]
	cons, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[event]{Name: topic}, func(_ context.Context, _ *gorm.DB, d txmsg.Delivery[event]) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, d)
		return nil
	})}, txrmq.ConsumerConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: group})
	require.NoError(t, err)
	require.NoError(t, cons.Start(ctx))
	t.Cleanup(func() { _ = cons.Close(context.Background()) })

	r := ctl(t, map[string]string{"TXMSG_DSN": dsn, "TXMSG_NAMESRV": testbed.NameServer()},
		"parked", "requeue", "-kind", "consumer", "-producer-group", testbed.Name(t, "ctl"), id)
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "replayed "+id+" (topic "+topic+") to group "+group+" only")
	require.Zero(t, count(t, db, txmsg.DefaultParkedTable, "1 = 1"))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	}, 60*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].Message.ID)
	require.Equal(t, 5, got[0].Event.N)
	require.Equal(t, "created", got[0].Message.Tag)
	require.Equal(t, "test", got[0].Message.Properties["origin"])
	require.False(t, strings.Contains(r.stderr, "error"), r.stderr)
}

package outbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func TestTransactCommitWritesPendingRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	m := &txmsg.Message{
		Topic: e.topic, Tag: "created", Keys: []string{"order-1", "cust-9"}, ShardingKey: "cust-9",
		Body: []byte(`{"order":1}`), Properties: map[string]string{"source": "test"},
	}
	r, err := e.ob.Transact(context.Background(), m, createOrder("order-1"))
	require.NoError(t, err)
	require.Equal(t, txmsg.StateCommitted, r.State)
	require.NotEmpty(t, r.ID)
	require.Equal(t, r.ID, m.ID, "Transact assigns the ID to the message")

	rows := e.rows("")
	require.Len(t, rows, 1)
	row := rows[0]
	require.Equal(t, r.ID, row.MsgID)
	require.Equal(t, StatusPending, row.Status)
	require.Equal(t, e.topic, row.Topic)
	require.Equal(t, "created", row.Tag)
	require.Equal(t, "order-1 cust-9", row.Keys)
	require.Equal(t, "cust-9", row.ShardingKey)
	require.Equal(t, bucketOf("cust-9", DefaultBuckets), row.Bucket)
	require.Equal(t, `{"order":1}`, string(row.Body))
	require.JSONEq(t, `{"source":"test"}`, row.Properties)
	require.Zero(t, row.Attempts)
	require.Nil(t, row.SentAt)
	require.False(t, row.NextAttemptAt.IsZero())
	require.EqualValues(t, 1, e.count("orders"))

	back, err := row.message()
	require.NoError(t, err)
	require.Equal(t, m, back)
}

func TestTransactKeepsCallerID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	r, err := e.ob.Transact(context.Background(), e.msg("a", func(m *txmsg.Message) { m.ID = "my-id-1" }), createOrder("a"))
	require.NoError(t, err)
	require.Equal(t, "my-id-1", r.ID)

	r, err = e.ob.Transact(context.Background(), e.msg("b", func(m *txmsg.Message) { m.ID = "my-id-1" }), createOrder("b"))
	require.ErrorIs(t, err, txmsg.ErrDuplicateID)
	require.Equal(t, txmsg.StateRolledBack, r.State)
	require.EqualValues(t, 1, e.count("orders"), "the second local transaction rolled back")
	require.Len(t, e.rows(""), 1)
}

func TestTransactLocalErrorWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	boom := errors.New("out of stock")
	r, err := e.ob.Transact(context.Background(), e.msg("x"), func(ctx context.Context, tx *gorm.DB) error {
		require.NoError(t, createOrder("x")(ctx, tx))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.NotNil(t, r)
	require.Equal(t, txmsg.StateRolledBack, r.State)
	require.NotEmpty(t, r.ID)
	require.Empty(t, e.rows(""))
	require.Zero(t, e.count("orders"))
}

func TestTransactPanicWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	r, err := e.ob.Transact(context.Background(), e.msg("x"), func(ctx context.Context, tx *gorm.DB) error {
		require.NoError(t, createOrder("x")(ctx, tx))
		panic("handler bug")
	})
	var pe *txmsg.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "handler bug", pe.Value)
	require.NotEmpty(t, pe.Stack)
	require.Equal(t, txmsg.StateRolledBack, r.State)
	require.Empty(t, e.rows(""))
	require.Zero(t, e.count("orders"))
}

func TestTransactRejectsBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxBodySize: 16})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	local := func(ctx context.Context, tx *gorm.DB) error { ran = true; return nil }
	cases := []struct {
		name  string
		ctx   context.Context
		msg   *txmsg.Message
		local txmsg.LocalTx
		want  error
	}{
		{"oversized body", context.Background(), e.msg(strings.Repeat("x", 17)), local, txmsg.ErrBodyTooLarge},
		{"invalid topic", context.Background(), &txmsg.Message{Topic: "bad topic!"}, local, txmsg.ErrInvalidTopic},
		{"reserved property", context.Background(), e.msg("x", func(m *txmsg.Message) { m.Properties = map[string]string{txmsg.PropertyID: "x"} }), local, txmsg.ErrInvalidMessage},
		{"nil message", context.Background(), nil, local, txmsg.ErrInvalidMessage},
		{"keys beyond the column", context.Background(), e.msg("x", func(m *txmsg.Message) {
			for i := range 5 {
				m.Keys = append(m.Keys, strings.Repeat(string(rune('a'+i)), 255))
			}
		}), local, txmsg.ErrInvalidMessage},
		{"nil local", context.Background(), e.msg("x"), nil, txmsg.ErrNilLocalTx},
		{"cancelled context", cancelled, e.msg("x"), local, context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := e.ob.Transact(c.ctx, c.msg, c.local)
			require.ErrorIs(t, err, c.want)
			require.Nil(t, r)
			require.False(t, ran, "local must not run")
			if c.msg != nil {
				require.Empty(t, c.msg.ID, "no ID is assigned to a rejected message")
			}
		})
	}
	require.Empty(t, e.rows(""))
}

func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxBodySize: 16})
	ctx := context.Background()

	err := e.db.Transaction(func(tx *gorm.DB) error {
		require.NoError(t, createOrder("a")(ctx, tx))
		return e.ob.EnqueueTx(ctx, tx, e.msg("1"), e.msg("2"), e.msg("3", withKey("k")))
	})
	require.NoError(t, err)
	rows := e.rows("")
	require.Len(t, rows, 3)
	for i, row := range rows {
		require.NotEmpty(t, row.MsgID)
		require.Equal(t, StatusPending, row.Status)
		require.Equal(t, string(rune('1'+i)), string(row.Body), "rows keep the order of the call")
	}

	// A bad message fails the call before anything is written, even when
	// the caller commits anyway.
	err = e.db.Transaction(func(tx *gorm.DB) error {
		require.NoError(t, createOrder("b")(ctx, tx))
		err := e.ob.EnqueueTx(ctx, tx, e.msg("ok"), e.msg(strings.Repeat("x", 17)))
		require.ErrorIs(t, err, txmsg.ErrBodyTooLarge)
		require.ErrorIs(t, err, txmsg.ErrInvalidMessage)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, e.rows(""), 3, "the rejected call wrote nothing")
	require.EqualValues(t, 2, e.count("orders"))

	// Rolled back with the caller's transaction.
	boom := errors.New("boom")
	err = e.db.Transaction(func(tx *gorm.DB) error {
		require.NoError(t, e.ob.EnqueueTx(ctx, tx, e.msg("gone")))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Len(t, e.rows(""), 3)

	require.ErrorIs(t, e.ob.EnqueueTx(ctx, nil, e.msg("x")), txmsg.ErrInvalidConfig)
}

func TestEnqueueTxLargeBatchIsChunked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	body := bytes.Repeat([]byte("b"), 300<<10)
	msgs := make([]*txmsg.Message, 10) // 3 MB in all: more than one INSERT
	for i := range msgs {
		msgs[i] = &txmsg.Message{Topic: e.topic, Body: body}
	}
	require.NoError(t, e.db.Transaction(func(tx *gorm.DB) error {
		return e.ob.EnqueueTx(context.Background(), tx, msgs...)
	}))
	rows := e.rows("")
	require.Len(t, rows, 10)
	require.Equal(t, body, rows[9].Body)
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	db := &gorm.DB{}
	_, err := New(nil, Config{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	for _, cfg := range []Config{
		{Table: "bad-name"},
		{Table: strings.Repeat("t", 60)}, // no room for "_lease"
		{MaxBodySize: -1},
		{Buckets: -1},
		{Buckets: maxBuckets + 1},
		{Hooks: txmsg.Hooks{struct{}{}}},
	} {
		_, err := New(db, cfg)
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "%+v", cfg)
	}
	o, err := New(db, Config{})
	require.NoError(t, err)
	require.Equal(t, DefaultTable, o.Table())
	require.Equal(t, txmsg.DefaultMaxBodySize, o.cfg.MaxBodySize)
	require.Equal(t, DefaultBuckets, o.cfg.Buckets)
}

// TestMigrateMatchesSQL checks that outbox.sql and Migrate build the same
// tables: collations, columns, types, nullability, defaults and indexes.
func TestMigrateMatchesSQL(t *testing.T) {
	t.Parallel()
	fromSQL := testbed.DB(t)
	ddl, err := os.ReadFile("outbox.sql")
	require.NoError(t, err)
	for _, stmt := range strings.Split(string(ddl), ";") {
		if strings.Contains(stmt, "CREATE TABLE") {
			require.NoError(t, fromSQL.Exec(stmt).Error)
		}
	}
	fromGorm := testbed.DB(t)
	ob, err := New(fromGorm, Config{})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(context.Background()))
	require.NoError(t, ob.Migrate(context.Background()), "Migrate is idempotent")

	for _, table := range []string{DefaultTable, DefaultTable + leaseSuffix, DefaultTable + relaySuffix} {
		require.Equal(t, describe(t, fromSQL, table), describe(t, fromGorm, table), table)
	}
}

func describe(t *testing.T, db *gorm.DB, table string) []string {
	var out []string
	var collation string
	require.NoError(t, db.Raw(`SELECT TABLE_COLLATION FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table).Scan(&collation).Error)
	out = append(out, "table collation "+collation)
	rows, err := db.Raw(`SELECT CONCAT_WS(' ', COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, IFNULL(COLUMN_DEFAULT, 'NULL'), EXTRA, IFNULL(COLLATION_NAME, '-'))
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, table).Rows()
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Close())
	rows, err = db.Raw(`SELECT CONCAT_WS(' ', INDEX_NAME, NON_UNIQUE, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX))
		FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?
		GROUP BY INDEX_NAME, NON_UNIQUE ORDER BY INDEX_NAME`, table).Rows()
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Close())
	require.NotEmpty(t, out)
	return out
}

// Many small messages: a single INSERT would pass the server's 65,535
// placeholders.
func TestEnqueueTxManySmallMessagesIsChunked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	msgs := make([]*txmsg.Message, 5000)
	for i := range msgs {
		msgs[i] = &txmsg.Message{Topic: e.topic, Body: []byte("x")}
	}
	require.NoError(t, e.db.Transaction(func(tx *gorm.DB) error {
		return e.ob.EnqueueTx(context.Background(), tx, msgs...)
	}))
	require.Len(t, e.rows(""), 5000)
}

// Caller-chosen IDs that differ only in case are different messages,
// whatever the database's default collation: Transact and EnqueueTx accept
// both, and the relay publishes both.
func TestIDsDifferingInCaseAreDistinct(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, Config{}, testbed.ServerDefaults())
	ctx := context.Background()
	base := "Order-" + testbed.Suffix() + "x" // a letter, so that case tells every ID apart
	ids := []string{base, strings.ToLower(base), strings.ToUpper(base), "order-" + strings.ToUpper(base[6:])}
	withID := func(id string) func(*txmsg.Message) { return func(m *txmsg.Message) { m.ID = id } }

	// The business table's own key is the test's: its rows are numbered.
	for i, id := range ids[:2] {
		_, err := e.ob.Transact(ctx, e.msg(id, withID(id), withKey(id)), createOrder(strconv.Itoa(i)))
		require.NoError(t, err, id)
	}
	require.NoError(t, e.db.Transaction(func(tx *gorm.DB) error {
		return e.ob.EnqueueTx(ctx, tx, e.msg(ids[2], withID(ids[2]), withKey(ids[2])), e.msg(ids[3], withID(ids[3]), withKey(ids[3])))
	}))
	// The same ID again is still a duplicate.
	_, err := e.ob.Transact(ctx, e.msg("again", withID(ids[1])), createOrder("again"))
	require.ErrorIs(t, err, txmsg.ErrDuplicateID)

	rows := e.rows("")
	require.Len(t, rows, len(ids))
	for i, row := range rows {
		require.Equal(t, ids[i], row.MsgID)
		require.Equal(t, ids[i], string(row.Body))
		require.Equal(t, ids[i], row.ShardingKey)
	}

	pub := newMemPublisher()
	start(t, e.relay(pub, RelayConfig{}))
	require.Eventually(t, func() bool { return pub.distinct() == len(ids) }, waitFor, tick)
	for _, id := range ids {
		require.Equal(t, 1, pub.times(id), id)
	}
	require.Eventually(t, func() bool { return len(e.rows("status = ?", StatusSent)) == len(ids) }, waitFor, tick)
}

// TestEnqueueTxRefusesPlainHandle: a *gorm.DB that is not inside a
// transaction is refused before anything is written. Given one, the rows
// would be committed chunk by chunk on their own, with no business write
// to tie them to: a failure halfway would leave part of the batch.
func TestEnqueueTxRefusesPlainHandle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	body := bytes.Repeat([]byte("b"), 300<<10)
	dup := txmsg.NewID()
	msgs := []*txmsg.Message{{Topic: e.topic, Body: body, ID: dup}}
	for range 6 { // more than one INSERT; the last repeats the first ID
		msgs = append(msgs, &txmsg.Message{Topic: e.topic, Body: body})
	}
	msgs = append(msgs, &txmsg.Message{Topic: e.topic, Body: body, ID: dup})

	for name, h := range map[string]*gorm.DB{
		"db":          e.db,
		"WithContext": e.db.WithContext(ctx),
		"Session":     e.db.Session(&gorm.Session{}),
		"Table":       e.db.Table("orders"),
	} {
		err := e.ob.EnqueueTx(ctx, h, msgs...)
		require.ErrorIs(t, err, ErrNotInTransaction, name)
		require.Zero(t, e.count(e.ob.Table()), "%s: nothing written", name)
	}

	// A transaction from Begin, and handles derived from one, are fine.
	tx := e.db.Begin()
	require.NoError(t, tx.Error)
	require.NoError(t, e.ob.EnqueueTx(ctx, tx, e.msg("begin")))
	require.NoError(t, e.ob.EnqueueTx(ctx, tx.WithContext(ctx).Session(&gorm.Session{}), e.msg("derived")))
	require.NoError(t, tx.Commit().Error)
	require.EqualValues(t, 2, e.count(e.ob.Table()))
}

// Package conformance is the behaviour suite every txmsg.Transactor runs:
// the transactional producer and the outbox pass the same cases against the
// real broker and database, so a service can switch modes by wiring alone.
// Modes declare Features; a case a mode cannot support skips itself.
package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// Features says what a mode supports beyond the common cases.
type Features struct {
	// BrokerMessageID: a committed Receipt carries the broker's message ID.
	BrokerMessageID bool
}

// Env is one case's mode under test, built fresh by the mode's setup.
type Env struct {
	// Transactor is the mode, started and ready; the setup closes it when
	// the test ends. Committed messages must reach the broker without
	// further help (the outbox setup runs a relay).
	Transactor txmsg.Transactor
	// DB is the database the local transactions write to.
	DB *gorm.DB
	// Topic exists on the test broker.
	Topic string
}

// Setup builds an Env for one test.
type Setup func(t *testing.T) Env

// Row is the business row the cases write.
type Row struct {
	ID    int64  `gorm:"primaryKey;autoIncrement"`
	MsgID string `gorm:"size:64"`
	Note  string `gorm:"size:64"`
}

// TableName keeps the table name fixed whatever the package.
func (Row) TableName() string { return "conformance_rows" }

// Run runs every case against the mode built by setup.
func Run(t *testing.T, f Features, setup Setup) {
	cases := []struct {
		name string
		fn   func(t *testing.T, f Features, e Env, o *testbed.Observer)
	}{
		{"CommitDeliversOnce", commitDeliversOnce},
		{"TypedProducerRoundTrip", typedRoundTrip},
		{"LocalErrorDeliversNothing", localErrorDeliversNothing},
		{"LocalPanicDeliversNothing", localPanicDeliversNothing},
		{"BadInputSendsAndWritesNothing", badInput},
		{"DuplicateIDRejected", duplicateID},
		{"IDsDifferingInCaseAreDistinct", caseDistinctIDs},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			require.NoError(t, e.DB.AutoMigrate(&Row{}))
			o := testbed.Observe(t, e.Topic, nil)
			c.fn(t, f, e, o)
		})
	}
}

func insertRow(note string) txmsg.LocalTx {
	return func(ctx context.Context, tx *gorm.DB) error {
		return tx.Create(&Row{MsgID: txmsg.NewID(), Note: note}).Error
	}
}

func rows(t *testing.T, e Env) int64 {
	t.Helper()
	var n int64
	require.NoError(t, e.DB.Model(&Row{}).Count(&n).Error)
	return n
}

func commitDeliversOnce(t *testing.T, f Features, e Env, o *testbed.Observer) {
	msg := &txmsg.Message{Topic: e.Topic, Tag: "created", Keys: []string{"order-1"}, Body: []byte(`{"n":1}`),
		Properties: map[string]string{"origin": "conformance"}}
	receipt, err := e.Transactor.Transact(context.Background(), msg, insertRow("commit"))
	require.NoError(t, err)
	require.Equal(t, txmsg.StateCommitted, receipt.State)
	require.Equal(t, msg.ID, receipt.ID)
	require.NotEmpty(t, receipt.ID)
	if f.BrokerMessageID {
		require.NotEmpty(t, receipt.BrokerMessageID)
	}
	require.EqualValues(t, 1, rows(t, e))
	o.DeliveredOnce(t, msg.ID)
	got := o.First(msg.ID)
	require.Equal(t, msg.Body, got.Body)
	require.Equal(t, "created", got.GetTags())
	require.Contains(t, got.GetKeys(), "order-1")
	require.Equal(t, "conformance", got.GetProperty("origin"))
}

type orderCreated struct {
	OrderID string `json:"order_id"`
	Qty     int    `json:"qty"`
}

func typedRoundTrip(t *testing.T, _ Features, e Env, o *testbed.Observer) {
	p, err := txmsg.NewProducer(e.Transactor, txmsg.Topic[orderCreated]{Name: e.Topic})
	require.NoError(t, err)
	evt := orderCreated{OrderID: "o-9", Qty: 3}
	receipt, err := p.Send(context.Background(), evt, insertRow("typed"), txmsg.WithShardingKey("user-9"))
	require.NoError(t, err)
	o.DeliveredOnce(t, receipt.ID)
	got, err := txmsg.JSONCodec[orderCreated]{}.Decode(o.First(receipt.ID).Body)
	require.NoError(t, err)
	require.Equal(t, evt, got)
	require.Equal(t, "user-9", o.First(receipt.ID).GetProperty(txmsg.PropertyShardingKey))
}

func localErrorDeliversNothing(t *testing.T, _ Features, e Env, o *testbed.Observer) {
	boom := errors.New("declined")
	msg := &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`)}
	receipt, err := e.Transactor.Transact(context.Background(), msg, func(ctx context.Context, tx *gorm.DB) error {
		if err := insertRow("error")(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	if receipt != nil {
		require.Equal(t, txmsg.StateRolledBack, receipt.State)
	}
	require.Zero(t, rows(t, e))
	o.NeverDelivered(t, msg.ID, 4*time.Second)
}

func localPanicDeliversNothing(t *testing.T, _ Features, e Env, o *testbed.Observer) {
	msg := &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`)}
	_, err := e.Transactor.Transact(context.Background(), msg, func(ctx context.Context, tx *gorm.DB) error {
		_ = insertRow("panic")(ctx, tx)
		panic("boom")
	})
	var pe *txmsg.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	require.Zero(t, rows(t, e))

	// The mode keeps working after a panic.
	next := &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`)}
	_, err = e.Transactor.Transact(context.Background(), next, insertRow("after panic"))
	require.NoError(t, err)
	o.DeliveredOnce(t, next.ID)
	require.Zero(t, o.Count(msg.ID))
}

func badInput(t *testing.T, _ Features, e Env, o *testbed.Observer) {
	ran := false
	local := func(ctx context.Context, tx *gorm.DB) error { ran = true; return insertRow("bad")(ctx, tx) }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name  string
		ctx   context.Context
		msg   *txmsg.Message
		local txmsg.LocalTx
		want  error
	}{
		{"oversized body", context.Background(), &txmsg.Message{Topic: e.Topic, Body: make([]byte, txmsg.DefaultMaxBodySize+1)}, local, txmsg.ErrBodyTooLarge},
		{"invalid topic", context.Background(), &txmsg.Message{Topic: "no spaces allowed", Body: []byte(`{}`)}, local, txmsg.ErrInvalidTopic},
		{"system topic", context.Background(), &txmsg.Message{Topic: "RMQ_SYS_TRANS_HALF_TOPIC", Body: []byte(`{}`)}, local, txmsg.ErrInvalidTopic},
		{"reserved property", context.Background(), &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`), Properties: map[string]string{"KEYS": "x"}}, local, txmsg.ErrInvalidMessage},
		{"nil message", context.Background(), nil, local, txmsg.ErrInvalidMessage},
		{"empty body", context.Background(), &txmsg.Message{Topic: e.Topic}, local, txmsg.ErrInvalidMessage},
		{"nil local", context.Background(), &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`)}, nil, txmsg.ErrNilLocalTx},
		{"cancelled context", cancelled, &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`)}, local, context.Canceled},
	}
	for _, c := range cases {
		_, err := e.Transactor.Transact(c.ctx, c.msg, c.local)
		require.ErrorIs(t, err, c.want, c.name)
	}
	require.False(t, ran, "local must not run for a rejected message")
	require.Zero(t, rows(t, e))
	o.NoDeliveries(t, 3*time.Second)
}

func duplicateID(t *testing.T, _ Features, e Env, o *testbed.Observer) {
	id := txmsg.NewID()
	_, err := e.Transactor.Transact(context.Background(), &txmsg.Message{ID: id, Topic: e.Topic, Body: []byte(`1`)}, insertRow("first"))
	require.NoError(t, err)
	_, err = e.Transactor.Transact(context.Background(), &txmsg.Message{ID: id, Topic: e.Topic, Body: []byte(`2`)}, insertRow("second"))
	require.ErrorIs(t, err, txmsg.ErrDuplicateID)
	require.EqualValues(t, 1, rows(t, e), "the second transaction rolled back")
	o.DeliveredOnce(t, id)
	require.Equal(t, []byte(`1`), o.First(id).Body)
}

// caseDistinctIDs: caller-chosen IDs that differ only in case are two
// messages, whatever the database's collation (run the suite with
// TXMSG_TEST_DB_DEFAULTS=1 to meet the server's default).
func caseDistinctIDs(t *testing.T, _ Features, e Env, o *testbed.Observer) {
	upper := "Order-" + testbed.Suffix()
	ids := []string{upper, strings.ToLower(upper)}
	for i, id := range ids {
		_, err := e.Transactor.Transact(context.Background(), &txmsg.Message{ID: id, Topic: e.Topic, Body: []byte{'1' + byte(i)}}, insertRow(id))
		require.NoError(t, err, id)
	}
	require.EqualValues(t, 2, rows(t, e))
	for i, id := range ids {
		o.DeliveredOnce(t, id)
		require.Equal(t, []byte{'1' + byte(i)}, o.First(id).Body, id)
	}
}

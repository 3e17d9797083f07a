package txmsgtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
)

// TransactorEnv is one case's subject and what it runs against, built
// fresh by the caller's setup function for each case.
type TransactorEnv struct {
	// Transactor is the subject, started and ready. The setup closes it
	// when the test ends (t.Cleanup). A committed message must reach the
	// broker without further help: a mode that publishes later, like the
	// outbox, runs its relay for the test.
	Transactor txmsg.Transactor
	// DB is the database the local transactions write to. The suite
	// creates its table, txmsgtest_rows, in it.
	DB *gorm.DB
	// Topic exists on the broker; the cases send to it.
	Topic string
	// Observer reports every delivery of Topic.
	Observer Observer
	// BrokerMessageID says the Transactor knows the broker's message ID
	// at commit time: a committed Receipt must carry it.
	BrokerMessageID bool
}

// Row is the business row the cases write in their local transactions.
type Row struct {
	ID    int64  `gorm:"primaryKey;autoIncrement"`
	MsgID string `gorm:"size:64"`
	Note  string `gorm:"size:64"`
}

// TableName keeps the table's name fixed: txmsgtest_rows.
func (Row) TableName() string { return "txmsgtest_rows" }

// RunTransactor runs every Transactor case as a parallel subtest of t,
// each against the environment setup builds for it.
func RunTransactor(t *testing.T, setup func(t *testing.T) TransactorEnv) {
	cases := []struct {
		name string
		fn   func(t *testing.T, e TransactorEnv)
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
			if e.Transactor == nil || e.DB == nil || e.Topic == "" || e.Observer == nil {
				t.Fatal("txmsgtest: the setup must return a TransactorEnv with Transactor, DB, Topic and Observer")
			}
			if err := e.DB.AutoMigrate(&Row{}); err != nil {
				t.Fatalf("create %s: %v", Row{}.TableName(), err)
			}
			c.fn(t, e)
		})
	}
}

func insertRow(note string) txmsg.LocalTx {
	return func(ctx context.Context, tx *gorm.DB) error {
		return tx.Create(&Row{MsgID: txmsg.NewID(), Note: note}).Error
	}
}

func rows(t *testing.T, e TransactorEnv) int64 {
	t.Helper()
	var n int64
	if err := e.DB.Model(&Row{}).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", Row{}.TableName(), err)
	}
	return n
}

func wantRows(t *testing.T, e TransactorEnv, want int64, why string) {
	t.Helper()
	if n := rows(t, e); n != want {
		t.Fatalf("%d business rows, want %d: %s", n, want, why)
	}
}

func commitDeliversOnce(t *testing.T, e TransactorEnv) {
	msg := &txmsg.Message{Topic: e.Topic, Tag: "created", Keys: []string{"order-1"}, Body: []byte(`{"n":1}`),
		Properties: map[string]string{"origin": "conformance"}}
	receipt, err := e.Transactor.Transact(context.Background(), msg, insertRow("commit"))
	if err != nil {
		t.Fatalf("Transact: %v", err)
	}
	if receipt == nil || receipt.State != txmsg.StateCommitted {
		t.Fatalf("receipt %+v, want state committed", receipt)
	}
	if msg.ID == "" || receipt.ID != msg.ID {
		t.Fatalf("receipt ID %q, message ID %q: Transact assigns an ID and reports it", receipt.ID, msg.ID)
	}
	if e.BrokerMessageID && receipt.BrokerMessageID == "" {
		t.Error("receipt has no BrokerMessageID")
	}
	wantRows(t, e, 1, "the local transaction committed")
	checkFields(t, msg, deliveredOnce(t, e.Observer, msg.ID))
}

type orderCreated struct {
	OrderID string `json:"order_id"`
	Qty     int    `json:"qty"`
}

func typedRoundTrip(t *testing.T, e TransactorEnv) {
	p, err := txmsg.NewProducer(e.Transactor, txmsg.Topic[orderCreated]{Name: e.Topic})
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	evt := orderCreated{OrderID: "o-9", Qty: 3}
	receipt, err := p.Send(context.Background(), evt, insertRow("typed"), txmsg.WithShardingKey("user-9"))
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := deliveredOnce(t, e.Observer, receipt.ID)
	decoded, err := txmsg.JSONCodec[orderCreated]{}.Decode(got.Body)
	if err != nil {
		t.Fatalf("decode %q: %v", got.Body, err)
	}
	if decoded != evt {
		t.Errorf("event %+v delivered, %+v sent", decoded, evt)
	}
	if got.ShardingKey != "user-9" {
		t.Errorf("sharding key %q delivered, user-9 sent", got.ShardingKey)
	}
}

func localErrorDeliversNothing(t *testing.T, e TransactorEnv) {
	boom := errors.New("declined")
	msg := &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`)}
	receipt, err := e.Transactor.Transact(context.Background(), msg, func(ctx context.Context, tx *gorm.DB) error {
		if err := insertRow("error")(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Transact returned %v, want the local transaction's error", err)
	}
	if receipt != nil && receipt.State != txmsg.StateRolledBack {
		t.Errorf("receipt state %v, want rolled back", receipt.State)
	}
	wantRows(t, e, 0, "the local transaction failed")
	neverDelivered(t, e.Observer, msg.ID)
}

func localPanicDeliversNothing(t *testing.T, e TransactorEnv) {
	msg := &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`)}
	_, err := e.Transactor.Transact(context.Background(), msg, func(ctx context.Context, tx *gorm.DB) error {
		_ = insertRow("panic")(ctx, tx)
		panic("boom")
	})
	var pe *txmsg.PanicError
	if !errors.As(err, &pe) || pe.Value != "boom" {
		t.Fatalf("Transact returned %v, want a *txmsg.PanicError with the panic's value", err)
	}
	wantRows(t, e, 0, "the local transaction panicked")

	// The Transactor keeps working after a panic.
	next := &txmsg.Message{Topic: e.Topic, Body: []byte(`{}`)}
	if _, err := e.Transactor.Transact(context.Background(), next, insertRow("after panic")); err != nil {
		t.Fatalf("Transact after a panic: %v", err)
	}
	deliveredOnce(t, e.Observer, next.ID)
	if n := len(e.Observer.Delivered(msg.ID)); n > 0 {
		t.Fatalf("the panicking transaction's message was delivered %d times", n)
	}
}

func badInput(t *testing.T, e TransactorEnv) {
	ran := false
	local := func(ctx context.Context, tx *gorm.DB) error { ran = true; return insertRow("bad")(ctx, tx) }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	msg := func(topic string, body []byte) *txmsg.Message {
		return &txmsg.Message{ID: txmsg.NewID(), Topic: topic, Body: body}
	}
	reserved := msg(e.Topic, []byte(`{}`))
	reserved.Properties = map[string]string{"KEYS": "x"}
	cases := []struct {
		name  string
		ctx   context.Context
		msg   *txmsg.Message
		local txmsg.LocalTx
		want  error
	}{
		{"oversized body", context.Background(), msg(e.Topic, make([]byte, txmsg.DefaultMaxBodySize+1)), local, txmsg.ErrBodyTooLarge},
		{"invalid topic", context.Background(), msg("no spaces allowed", []byte(`{}`)), local, txmsg.ErrInvalidTopic},
		{"system topic", context.Background(), msg("RMQ_SYS_TRANS_HALF_TOPIC", []byte(`{}`)), local, txmsg.ErrInvalidTopic},
		{"reserved property", context.Background(), reserved, local, txmsg.ErrInvalidMessage},
		{"nil message", context.Background(), nil, local, txmsg.ErrInvalidMessage},
		{"empty body", context.Background(), msg(e.Topic, nil), local, txmsg.ErrInvalidMessage},
		{"nil local", context.Background(), msg(e.Topic, []byte(`{}`)), nil, txmsg.ErrNilLocalTx},
		{"cancelled context", cancelled, msg(e.Topic, []byte(`{}`)), local, context.Canceled},
	}
	var ids []string
	for _, c := range cases {
		if _, err := e.Transactor.Transact(c.ctx, c.msg, c.local); !errors.Is(err, c.want) {
			t.Errorf("%s: Transact returned %v, want an error wrapping %v", c.name, err, c.want)
		}
		if c.msg != nil {
			ids = append(ids, c.msg.ID)
		}
	}
	if ran {
		t.Error("the local transaction ran for a refused message")
	}
	wantRows(t, e, 0, "every message was refused")
	neverDelivered(t, e.Observer, ids...)
}

func duplicateID(t *testing.T, e TransactorEnv) {
	id := txmsg.NewID()
	if _, err := e.Transactor.Transact(context.Background(), &txmsg.Message{ID: id, Topic: e.Topic, Body: []byte(`1`)}, insertRow("first")); err != nil {
		t.Fatalf("first Transact: %v", err)
	}
	_, err := e.Transactor.Transact(context.Background(), &txmsg.Message{ID: id, Topic: e.Topic, Body: []byte(`2`)}, insertRow("second"))
	if !errors.Is(err, txmsg.ErrDuplicateID) {
		t.Fatalf("second Transact with the same ID returned %v, want txmsg.ErrDuplicateID", err)
	}
	wantRows(t, e, 1, "the second transaction rolled back")
	if got := deliveredOnce(t, e.Observer, id); string(got.Body) != "1" {
		t.Fatalf("body %q delivered, want the first message's", got.Body)
	}
}

// caseDistinctIDs: caller-chosen IDs that differ only in case are two
// messages, whatever the database's collation.
func caseDistinctIDs(t *testing.T, e TransactorEnv) {
	upper := "Order-" + strings.ToUpper(txmsg.NewID())
	ids := []string{upper, strings.ToLower(upper)}
	for i, id := range ids {
		if _, err := e.Transactor.Transact(context.Background(), &txmsg.Message{ID: id, Topic: e.Topic, Body: []byte{'1' + byte(i)}}, insertRow(id)); err != nil {
			t.Fatalf("Transact %s: %v", id, err)
		}
	}
	wantRows(t, e, 2, "both transactions committed")
	for i, id := range ids {
		if got := deliveredOnce(t, e.Observer, id); string(got.Body) != string([]byte{'1' + byte(i)}) {
			t.Errorf("%s: body %q delivered, %q sent", id, got.Body, []byte{'1' + byte(i)})
		}
	}
}

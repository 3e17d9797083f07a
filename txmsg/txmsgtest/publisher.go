package txmsgtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
)

// PublisherEnv is one case's subject and what it runs against, built
// fresh by the caller's setup function for each case.
type PublisherEnv struct {
	// Publisher is the subject, started, on a broker that answers. The
	// setup closes it when the test ends (t.Cleanup).
	Publisher txmsg.Publisher
	// Topic exists on the broker; the cases publish to it.
	Topic string
	// Observer reports every delivery of Topic.
	Observer Observer
	// Unavailable, when set, returns a Publisher of the same kind, started
	// and closed when t ends, whose broker does not answer (a name server
	// or broker address that nobody listens on). Without it the case that
	// checks how such a failure is reported skips.
	Unavailable func(t testing.TB) txmsg.Publisher
	// Rejected, when set, returns a message to topic that passes
	// [txmsg.Message.Validate] but that the broker refuses (for RocketMQ,
	// a body larger than the broker's maxMessageSize, with a Publisher
	// whose own limit is higher). Without it the case that checks how a
	// refusal is reported skips.
	Rejected func(topic string) *txmsg.Message
	// DB, when set, is a database of the case's own in which the relay
	// cases create the outbox table and run the outbox relay over the
	// Publisher (and over Unavailable's). Without it they skip.
	DB *gorm.DB
}

// publishWait bounds each Publish call of the cases.
const publishWait = 30 * time.Second

// RunPublisher runs every Publisher case as a parallel subtest of t,
// each against the environment setup builds for it.
func RunPublisher(t *testing.T, setup func(t *testing.T) PublisherEnv) {
	cases := []struct {
		name string
		fn   func(t testing.TB, e PublisherEnv)
	}{
		{"PublishDeliversOnce", publishDeliversOnce},
		{"BatchDeliversEach", batchDeliversEach},
		{"NothingToPublish", nothingToPublish},
		{"InvalidMessageFailsAlone", invalidFailsAlone},
		{"RejectedIsNotUnavailable", rejectedIsNotUnavailable},
		{"UnavailableIsNotRejected", unavailableIsNotRejected},
		{"RelayKeepsRowsWhileUnavailable", relayKeepsRowsWhileUnavailable},
		{"RelayParksRefusedRows", relayParksRefusedRows},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			if e.Publisher == nil || e.Topic == "" || e.Observer == nil {
				t.Fatal("txmsgtest: the setup must return a PublisherEnv with Publisher, Topic and Observer")
			}
			c.fn(t, e)
		})
	}
}

func publish(e PublisherEnv, p txmsg.Publisher, msgs ...*txmsg.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), publishWait)
	defer cancel()
	return p.Publish(ctx, msgs...)
}

func publishDeliversOnce(t testing.TB, e PublisherEnv) {
	msg := &txmsg.Message{ID: txmsg.NewID(), Topic: e.Topic, Tag: "created", Keys: []string{"order-1"},
		ShardingKey: "user-1", Body: []byte(`{"n":1}`), Properties: map[string]string{"origin": "conformance"}}
	if err := publish(e, e.Publisher, msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	checkFields(t, msg, deliveredOnce(t, e.Observer, msg.ID))
}

// batchDeliversEach: one call with messages of several sharding keys and
// none, as the relay sends them.
func batchDeliversEach(t testing.TB, e PublisherEnv) {
	var msgs []*txmsg.Message
	for i := range 12 {
		m := &txmsg.Message{ID: txmsg.NewID(), Topic: e.Topic, Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		if i%3 != 0 {
			m.ShardingKey = fmt.Sprintf("key-%d", i%3)
		}
		msgs = append(msgs, m)
	}
	if err := publish(e, e.Publisher, msgs...); err != nil {
		t.Fatalf("Publish of %d messages: %v", len(msgs), err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	for i, got := range deliveredOnceEach(t, e.Observer, ids...) {
		checkFields(t, msgs[i], got)
	}
}

func nothingToPublish(t testing.TB, e PublisherEnv) {
	if err := publish(e, e.Publisher); err != nil {
		t.Fatalf("Publish of no message: %v, want nil", err)
	}
}

// failsAlone checks a batch of good and bad: the error is a
// *txmsg.BatchError with an entry per message, nil for good, and good is
// delivered once. A Publisher that failed the whole call would make the
// relay count an attempt against good too, and in the end park it.
func failsAlone(t testing.TB, e PublisherEnv, good, bad *txmsg.Message, err error) error {
	t.Helper()
	var be *txmsg.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 2 {
		t.Fatalf("Publish of a good and a bad message returned %v; want a *txmsg.BatchError with an entry per message "+
			"(a failure of the whole call would count against the good message too)", err)
	}
	if be.Errs[0] != nil {
		t.Fatalf("the good message failed: %v", be.Errs[0])
	}
	if be.Errs[1] == nil {
		t.Fatal("the bad message did not fail")
	}
	deliveredOnce(t, e.Observer, good.ID)
	neverDelivered(t, e.Observer, bad.ID)
	return be.Errs[1]
}

// messageFailure checks that err reports a failure of the message
// itself, which the relay counts toward a row's attempts.
func messageFailure(t testing.TB, err error, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("error %v does not wrap %v", err, sentinel)
	}
	if txmsg.IsUnavailable(err) {
		t.Errorf("error %v reads as the broker's (txmsg.IsUnavailable): the relay would retry the message forever", err)
	}
}

// invalidFailsAlone: a message that breaks a rule fails with
// txmsg.ErrInvalidMessage, alone and before anything is sent.
func invalidFailsAlone(t testing.TB, e PublisherEnv) {
	bad := &txmsg.Message{ID: txmsg.NewID(), Topic: "no spaces allowed", Body: []byte(`{}`)}
	err := publish(e, e.Publisher, bad)
	if err == nil {
		t.Fatal("Publish of a message with an invalid topic returned nil")
	}
	messageFailure(t, err, txmsg.ErrInvalidMessage)

	good := &txmsg.Message{ID: txmsg.NewID(), Topic: e.Topic, Body: []byte(`{"good":true}`)}
	bad = &txmsg.Message{ID: txmsg.NewID(), Topic: e.Topic, Body: []byte(`{}`), Properties: map[string]string{"KEYS": "reserved"}}
	messageFailure(t, failsAlone(t, e, good, bad, publish(e, e.Publisher, good, bad)), txmsg.ErrInvalidMessage)
}

// rejectedIsNotUnavailable: a message the broker refuses fails with
// txmsg.ErrRejected, alone. The relay counts an attempt for it and leaves
// the row parked after MaxAttempts: sending it again gets the same answer.
func rejectedIsNotUnavailable(t testing.TB, e PublisherEnv) {
	if e.Rejected == nil {
		t.Skip("PublisherEnv.Rejected is not set: no message the broker refuses")
	}
	refused := e.Rejected(e.Topic)
	if refused.ID == "" {
		refused.ID = txmsg.NewID()
	}
	err := publish(e, e.Publisher, refused)
	if err == nil {
		t.Fatal("Publish of the message the broker refuses returned nil")
	}
	messageFailure(t, err, txmsg.ErrRejected)

	good := &txmsg.Message{ID: txmsg.NewID(), Topic: e.Topic, Body: []byte(`{"good":true}`)}
	refused = e.Rejected(e.Topic)
	if refused.ID == "" {
		refused.ID = txmsg.NewID()
	}
	messageFailure(t, failsAlone(t, e, good, refused, publish(e, e.Publisher, good, refused)), txmsg.ErrRejected)
}

// unavailableIsNotRejected: while the broker does not answer, Publish
// fails, within its context, with an error that wraps
// txmsg.ErrUnavailable and not txmsg.ErrRejected. The relay keeps such a
// row waiting, without counting an attempt, however long the outage
// lasts: the same message goes through once the broker is back.
func unavailableIsNotRejected(t testing.TB, e PublisherEnv) {
	if e.Unavailable == nil {
		t.Skip("PublisherEnv.Unavailable is not set: no Publisher whose broker is away")
	}
	msgs := []*txmsg.Message{
		{ID: txmsg.NewID(), Topic: e.Topic, Body: []byte(`{"n":1}`)},
		{ID: txmsg.NewID(), Topic: e.Topic, ShardingKey: "k", Body: []byte(`{"n":2}`)},
	}
	start := time.Now()
	err := publish(e, e.Unavailable(t), msgs...)
	if err == nil {
		t.Fatal("Publish with the broker away returned nil")
	}
	if took := time.Since(start); took > publishWait+5*time.Second {
		t.Errorf("Publish with the broker away took %s, past its context's %s", took.Round(time.Second), publishWait)
	}
	errs := []error{err}
	var be *txmsg.BatchError
	if errors.As(err, &be) {
		errs = be.Errs
	}
	for _, err := range errs {
		if !errors.Is(err, txmsg.ErrUnavailable) {
			t.Errorf("error %v does not wrap txmsg.ErrUnavailable: the relay would count the outage against the rows", err)
		}
		if errors.Is(err, txmsg.ErrRejected) || !txmsg.IsUnavailable(err) {
			t.Errorf("error %v reads as a refusal of the message: the relay would park the rows after an outage", err)
		}
	}
}

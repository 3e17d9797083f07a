package txmsgtest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/txmsg"
)

// The relay cases run the outbox relay over the Publisher and check what
// its errors make the relay do with the rows: a row whose publish fails
// because the broker is away keeps waiting, pending, without counting an
// attempt; a row the broker refuses counts one and, with MaxAttempts 1,
// is parked at once.

// relayWatch is how long the relay runs against a broker that is away.
const relayWatch = 5 * time.Second

// startRelay creates the outbox table in db, returns the outbox and
// starts a relay over pub with MaxAttempts 1, stopped when t ends.
func startRelay(t testing.TB, db *gorm.DB, pub txmsg.Publisher, maxBody int) *outbox.Outbox {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ob, err := outbox.New(db, outbox.Config{MaxBodySize: maxBody, Logger: quiet})
	if err != nil {
		t.Fatalf("outbox.New: %v", err)
	}
	if err := ob.Migrate(context.Background()); err != nil {
		t.Fatalf("outbox Migrate: %v", err)
	}
	relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{
		MaxAttempts: 1, PollInterval: 100 * time.Millisecond,
		MinBackoff: 100 * time.Millisecond, MaxWaitBackoff: 200 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		t.Fatalf("outbox.NewRelay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ob
}

func enqueue(t testing.TB, ob *outbox.Outbox, msg *txmsg.Message) {
	t.Helper()
	if _, err := ob.Transact(context.Background(), msg, func(context.Context, *gorm.DB) error { return nil }); err != nil {
		t.Fatalf("outbox Transact %s: %v", msg.ID, err)
	}
}

func row(t testing.TB, ob *outbox.Outbox, id string) *outbox.Row {
	t.Helper()
	r, err := ob.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("outbox row %s: %v", id, err)
	}
	return r
}

// relayKeepsRowsWhileUnavailable: over a Publisher whose broker is away,
// the relay tries the row again and again and it stays pending with no
// attempt counted, even with MaxAttempts 1.
func relayKeepsRowsWhileUnavailable(t testing.TB, e PublisherEnv) {
	if e.DB == nil || e.Unavailable == nil {
		t.Skip("PublisherEnv.DB or PublisherEnv.Unavailable is not set")
	}
	ob := startRelay(t, e.DB, e.Unavailable(t), 0)
	msg := &txmsg.Message{ID: txmsg.NewID(), Topic: e.Topic, Body: []byte(`{"waits":true}`)}
	enqueue(t, ob, msg)
	deadline := time.Now().Add(relayWatch)
	tried := false
	for time.Now().Before(deadline) {
		r := row(t, ob, msg.ID)
		if r.Status != outbox.StatusPending || r.Attempts != 0 {
			t.Fatalf("row %s is %s after %d attempts (%s) while the broker is away; want pending with no attempt counted: "+
				"the Publisher's error must wrap txmsg.ErrUnavailable", msg.ID, r.Status, r.Attempts, r.LastError)
		}
		tried = tried || r.LastError != ""
		time.Sleep(poll)
	}
	if !tried {
		t.Fatalf("the relay never tried row %s within %s", msg.ID, relayWatch)
	}
}

// relayParksRefusedRows: a row the broker refuses is parked after
// MaxAttempts (1) and never delivered, while a good row goes out.
func relayParksRefusedRows(t testing.TB, e PublisherEnv) {
	if e.DB == nil || e.Rejected == nil {
		t.Skip("PublisherEnv.DB or PublisherEnv.Rejected is not set")
	}
	refused := e.Rejected(e.Topic)
	if refused.ID == "" {
		refused.ID = txmsg.NewID()
	}
	ob := startRelay(t, e.DB, e.Publisher, 2*len(refused.Body)+txmsg.DefaultMaxBodySize)
	good := &txmsg.Message{ID: txmsg.NewID(), Topic: e.Topic, Body: []byte(`{"good":true}`)}
	enqueue(t, ob, refused)
	enqueue(t, ob, good)
	deadline := time.Now().Add(deliveryWait)
	for {
		r := row(t, ob, refused.ID)
		if r.Status == outbox.StatusParked {
			break
		}
		if r.Status == outbox.StatusSent || time.Now().After(deadline) {
			t.Fatalf("row %s the broker refuses is %s after %d attempts (%s); want parked after its one attempt: "+
				"the Publisher's error must wrap txmsg.ErrRejected", refused.ID, r.Status, r.Attempts, r.LastError)
		}
		time.Sleep(poll)
	}
	deliveredOnce(t, e.Observer, good.ID)
	neverDelivered(t, e.Observer, refused.ID)
}

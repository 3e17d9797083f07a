// Package dashtest builds the world the dashboard's tests look at: a
// fresh database with txmsg's tables, real rows in them (parked and pending
// outbox rows, barrier rows, handled and parked messages), and, when
// asked, a topic on the real broker with a relay, a consumer with an
// inbox and an observer. The handler tests and the browser tests
// (dashboard/browsertest) share it.
package dashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/dashboard"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// Mount is the path the test server mounts the dashboard under, so that
// every test also checks that links work below a prefix.
const Mount = "/ops"

// Options choose what a Bed has.
type Options struct {
	// Broker gives the bed a topic, a publisher, a relay, a consumer of
	// Group with an inbox, an observer of the topic, and the dashboard
	// the name server.
	Broker bool
	// Token and AllowActions are the dashboard's.
	Token        string
	AllowActions bool
	// Health are extra components for the overview.
	Health []dashboard.HealthCheck
	// AllowedHosts is the dashboard's.
	AllowedHosts []string
	// SampleInterval is the dashboard's; default 1 s.
	SampleInterval time.Duration
	// HistoryRetention is the dashboard's; default its own (24 h).
	HistoryRetention time.Duration
}

// Event is what the bed's messages carry.
type Event struct {
	Order string `json:"order"`
	Qty   int    `json:"qty"`
}

// Bed is one test's world.
type Bed struct {
	T        testing.TB
	DB       *gorm.DB
	DSN      string
	Outbox   *outbox.Outbox
	Inbox    *txmsg.Inbox
	Checker  *checker.Checker
	Topic    string
	Group    string
	Pub      *txrmq.Publisher
	Observer *testbed.Observer
	// Relay is the name of the bed's relay (with Options.Broker).
	Relay  string
	Dash   *dashboard.Dashboard
	Server *httptest.Server
	// URL is the dashboard's root URL on Server, ending in "/".
	URL string
	// Logs holds everything the dashboard logged, as JSON lines.
	Logs *Buffer
}

// Buffer is a goroutine-safe log sink.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// New builds a bed; everything stops when t ends.
func New(t testing.TB, o Options) *Bed {
	t.Helper()
	testbed.QuietClientLogs()
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t)
	b := &Bed{T: t, DB: db, DSN: dsn, Logs: &Buffer{}}
	log := slog.New(slog.NewJSONHandler(b.Logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	b.Outbox, err = outbox.New(db, outbox.Config{Logger: log, Buckets: 8})
	must(err)
	b.Inbox, err = txmsg.NewInbox(db, txmsg.InboxConfig{Logger: log})
	must(err)
	b.Checker, err = checker.New(db, checker.Config{Logger: log})
	must(err)
	must(b.Outbox.Migrate(ctx))
	must(b.Inbox.Migrate(ctx))
	must(b.Checker.Migrate(ctx))
	must(fleet.Migrate(ctx, db, fleet.DefaultTable))
	b.Topic = "dash_topic_" + testbed.Suffix()
	b.Group = testbed.Name(t, "dcg")
	cfg := dashboard.Config{
		Outbox: b.Outbox, Inbox: b.Inbox, Checker: b.Checker,
		Token: o.Token, AllowActions: o.AllowActions, Health: o.Health, AllowedHosts: o.AllowedHosts,
		SampleInterval: o.SampleInterval, HistoryRetention: o.HistoryRetention, Logger: log,
	}
	if cfg.SampleInterval == 0 {
		cfg.SampleInterval = time.Second
	}
	if o.Broker {
		testbed.RequireBroker(t)
		b.Topic = testbed.Topic(t)
		b.Pub, err = txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: testbed.Name(t, "dpg"), Topics: []string{b.Topic}})
		must(err)
		must(b.Pub.Start(ctx))
		t.Cleanup(func() { _ = b.Pub.Close(context.Background()) })
		b.Observer = testbed.Observe(t, b.Topic, nil)
		// Ordered, so that the overview has bucket leases to show.
		b.Relay = "relay-" + testbed.Suffix()
		relay, err := outbox.NewRelay(b.Outbox, b.Pub, outbox.RelayConfig{Name: b.Relay,
			Ordered: true, PollInterval: 200 * time.Millisecond, Logger: log})
		must(err)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = relay.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
		route := txmsg.Handle(txmsg.Topic[Event]{Name: b.Topic}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[Event]) error {
			return nil // the inbox row is the effect the tests look for
		})
		cons, err := txrmq.NewConsumer(b.Inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{
			Conn:  txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log},
			Group: b.Group, RetryDelayLevel: 1,
		})
		must(err)
		must(cons.Start(ctx))
		t.Cleanup(func() { _ = cons.Close(context.Background()) })
		cfg.NameServers = []string{testbed.NameServer()}
		cfg.Publisher = b.Pub
		cfg.Topics = []string{b.Topic}
		cfg.Health = append(cfg.Health,
			dashboard.HealthCheck{Name: "relay", Check: relay.Health},
			dashboard.HealthCheck{Name: "consumer " + b.Group, Check: cons.Health})
	}
	b.Dash, err = dashboard.New(db, cfg)
	must(err)
	t.Cleanup(func() { _ = b.Dash.Close() })
	mux := http.NewServeMux()
	mux.Handle(Mount+"/", http.StripPrefix(Mount, b.Dash))
	b.Server = httptest.NewServer(mux)
	t.Cleanup(b.Server.Close)
	b.URL = b.Server.URL + Mount + "/"
	return b
}

// Body encodes ev as the bed's messages do.
func Body(ev Event) []byte {
	out, _ := json.Marshal(ev)
	return out
}

// ParkedRow inserts a parked outbox row for the bed's topic, as a relay leaves
// one after MaxAttempts failures, and returns its txmsg ID.
func (b *Bed) ParkedRow(key string, body []byte, lastError string) string {
	b.T.Helper()
	id := txmsg.NewID()
	now := time.Now().UTC().Add(-20 * time.Minute)
	row := outbox.Row{
		MsgID: id, Topic: b.Topic, Keys: key, Body: body, Properties: `{"trace":"abc-123"}`,
		Status: outbox.StatusParked, Attempts: 20, LastError: lastError,
		NextAttemptAt: now, CreatedAt: now, UpdatedAt: now.Add(10 * time.Minute),
	}
	if err := b.DB.Table(b.Outbox.Table()).Create(&row).Error; err != nil {
		b.T.Fatal(err)
	}
	return id
}

// PendingRow writes a message through the outbox as a service does, in a
// transaction of its own, and returns its txmsg ID. With a relay running
// it is published at once.
func (b *Bed) PendingRow(key string, ev Event) string {
	b.T.Helper()
	m := &txmsg.Message{Topic: b.Topic, Keys: []string{key}, Body: Body(ev)}
	rec, err := b.Outbox.Transact(context.Background(), m, func(ctx context.Context, tx *gorm.DB) error { return nil })
	if err != nil {
		b.T.Fatal(err)
	}
	return rec.ID
}

// Barrier records a committed transactional send of id.
func (b *Bed) Barrier(id string) {
	b.T.Helper()
	err := b.DB.Transaction(func(tx *gorm.DB) error { return b.Checker.Begin(context.Background(), tx, id) })
	if err != nil {
		b.T.Fatal(err)
	}
}

// Handled records id as handled by group in the inbox.
func (b *Bed) Handled(group, id string) {
	b.T.Helper()
	_, err := driver.Run(b.Inbox, context.Background(), group, b.Topic, id, func(ctx context.Context, tx *gorm.DB) error { return nil })
	if err != nil {
		b.T.Fatal(err)
	}
}

// Parked parks a message of the bed's topic for group, as a consumer does
// when it cannot decode the body, and returns its txmsg ID.
func (b *Bed) Parked(group, key string, body []byte, cause string) string {
	b.T.Helper()
	id := txmsg.NewID()
	r := &txmsg.Received{Message: &txmsg.Message{ID: id, Topic: b.Topic, Keys: []string{key}, Body: body,
		Properties: map[string]string{"trace": "def-456"}}, BrokerMessageID: "7F00000100002A9F0000000000" + id[:6], Attempt: 1}
	if err := driver.Park(b.Inbox, context.Background(), group, r, fmt.Errorf("%w: %s", txmsg.ErrDecode, cause)); err != nil {
		b.T.Fatal(err)
	}
	return id
}

// Failing runs a message of the bed's topic through group's inbox with a
// handler that fails with cause, attempts times, as a consumer does on
// each delivery, and returns its txmsg ID: it is then in the inbox's
// failing table.
func (b *Bed) Failing(group, key string, body []byte, cause string, attempts int) string {
	b.T.Helper()
	id := txmsg.NewID()
	route := txmsg.Handle(txmsg.Topic[Event]{Name: b.Topic}, func(context.Context, *gorm.DB, txmsg.Delivery[Event]) error {
		return errors.New(cause)
	})
	r := &txmsg.Received{Message: &txmsg.Message{ID: id, Topic: b.Topic, Keys: []string{key}, Body: body},
		BrokerMessageID: "7F00000100002A9F0000000000" + id[:6]}
	for r.Attempt = 1; r.Attempt <= attempts; r.Attempt++ {
		if _, err := driver.Process(route, context.Background(), b.Inbox, group, r); err == nil {
			b.T.Fatalf("the failing handler of %s succeeded", id)
		}
	}
	return id
}

// WaitHandled waits up to timeout for group's inbox row of id.
func (b *Bed) WaitHandled(group, id string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		rows, err := b.Inbox.Handled(context.Background(), id)
		if err == nil {
			for _, r := range rows {
				if r.ConsumerGroup == group {
					return true
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// Status reads the outbox status of id ("" when there is no row).
func (b *Bed) Status(id string) outbox.Status {
	row, err := b.Outbox.Get(context.Background(), id)
	if err != nil {
		return ""
	}
	return row.Status
}

// Burst writes n messages through the outbox in one transaction, as a
// service's batch job does.
func (b *Bed) Burst(n int) {
	b.T.Helper()
	msgs := make([]*txmsg.Message, n)
	for i := range msgs {
		msgs[i] = &txmsg.Message{Topic: b.Topic, Keys: []string{fmt.Sprintf("burst-%d", i)}, ShardingKey: fmt.Sprintf("customer-%d", i%7), Body: Body(Event{Order: fmt.Sprintf("b-%d", i), Qty: 1})}
	}
	err := b.DB.Transaction(func(tx *gorm.DB) error { return b.Outbox.EnqueueTx(context.Background(), tx, msgs...) })
	if err != nil {
		b.T.Fatal(err)
	}
}

// Replica starts a consumer of the bed's topic (Options.Broker) in group,
// as another replica's would be: it reaches the name server through ns and
// the database through db, proxies the test may cut, and writes its
// heartbeat every interval. Cutting ns makes its Health fail (the replica
// is cut off from the broker); cutting db stops its heartbeats, as a
// process that died would.
func (b *Bed) Replica(group string, interval time.Duration) (ns, db *testbed.Proxy) {
	t := b.T
	t.Helper()
	ns = testbed.NewProxy(t, testbed.NameServer())
	db, handle := testbed.ProxiedDB(t, b.DSN)
	inbox, err := txmsg.NewInbox(handle, txmsg.InboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	route := txmsg.Handle(txmsg.Topic[Event]{Name: b.Topic}, func(context.Context, *gorm.DB, txmsg.Delivery[Event]) error { return nil })
	cons, err := txrmq.NewConsumer(inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{
		Conn:      txrmq.Conn{NameServers: []string{ns.Addr()}, NameServerTimeout: time.Second},
		Group:     group,
		Heartbeat: fleet.Config{Interval: interval},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cons.Close(ctx)
	})
	return ns, db
}

// TransactionalTraffic runs transactional mode on the bed's database, as
// a service would next to the dashboard: a transactional stack and a
// consumer of a topic of its own, both heartbeating every 200 ms into the
// instance table. It sends n events, waits until the consumer handled
// them, and answers one check-back for the last (COMMIT), so that every
// counter of the history has moved. It returns the consumer's group.
func (b *Bed) TransactionalTraffic(n int) string {
	t := b.T
	t.Helper()
	testbed.RequireBroker(t)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	topic := testbed.Topic(t)
	beat := fleet.Config{Interval: 200 * time.Millisecond}
	st, err := stack.Transactional(b.DB, stack.TransactionalConfig{Config: stack.Config{
		RocketMQ: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "dtp"),
		Topics: []string{topic}, Heartbeat: beat}})
	must(err)
	must(st.Migrate(ctx))
	must(st.Start(ctx))
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	group := testbed.Name(t, "dtc")
	route := txmsg.Handle(txmsg.Topic[Event]{Name: topic}, func(context.Context, *gorm.DB, txmsg.Delivery[Event]) error { return nil })
	cons, err := txrmq.NewConsumer(b.Inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: group, Heartbeat: beat})
	must(err)
	must(cons.Start(ctx))
	t.Cleanup(func() { _ = cons.Close(context.Background()) })
	orders, err := txmsg.NewProducer(st, txmsg.Topic[Event]{Name: topic})
	must(err)
	var last *txmsg.Receipt
	for i := range n {
		last, err = orders.Send(ctx, Event{Order: "traffic", Qty: i}, func(context.Context, *gorm.DB) error { return nil })
		must(err)
	}
	if !b.WaitHandled(group, last.ID, 60*time.Second) {
		t.Fatalf("the consumer never handled %s", last.ID)
	}
	state, err := st.Transactional().ResolveCheckBack(ctx, last.ID, "")
	must(err)
	if state != txmsg.StateCommitted {
		t.Fatalf("check-back for %s answered %s, want committed", last.ID, state)
	}
	return group
}

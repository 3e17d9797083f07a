package txrmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// consumerEvent is the event type of the consumer tests.
type consumerEvent struct {
	N   int    `json:"n"`
	Key string `json:"key"`
}

// consumerEffect is a handler's business write. It has no unique key, so
// an effect applied twice shows up as two rows.
type consumerEffect struct {
	ID      int64  `gorm:"primaryKey;autoIncrement"`
	EventID string `gorm:"size:64;not null;index"`
	Part    int    `gorm:"not null"`
}

// consumerSeen is one OnConsumed call of the bed's inbox.
type consumerSeen struct {
	id      string
	attempt int
	outcome txmsg.Outcome
	err     error
}

// consumerBed is one consumer test's world: its own database, inbox,
// topic, consumer group and publisher.
type consumerBed struct {
	t     *testing.T
	db    *gorm.DB
	dsn   string
	inbox *txmsg.Inbox
	topic string
	group string
	pub   *txrmq.Publisher

	mu       sync.Mutex
	seen     []consumerSeen
	watchers []func(group string, r *txmsg.Received, o txmsg.Outcome, err error)
}

// OnConsumed implements txmsg.HookConsumed for the bed's inbox: it
// records every decision and passes it to the watchers.
func (b *consumerBed) OnConsumed(_ context.Context, group string, r *txmsg.Received, o txmsg.Outcome, err error, _ time.Duration) {
	b.mu.Lock()
	b.seen = append(b.seen, consumerSeen{id: r.Message.ID, attempt: r.Attempt, outcome: o, err: err})
	watchers := b.watchers
	b.mu.Unlock()
	for _, w := range watchers {
		w(group, r, o, err)
	}
}

// watch calls f after every OnConsumed.
func (b *consumerBed) watch(f func(group string, r *txmsg.Received, o txmsg.Outcome, err error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watchers = append(b.watchers, f)
}

func newConsumerBed(t *testing.T, opts ...testbed.DBOption) *consumerBed {
	t.Helper()
	// First: it writes the client's and the MySQL driver's global loggers,
	// which the calls below read.
	testbed.QuietClientLogs()
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t, opts...)
	topic := testbed.Topic(t)
	b := &consumerBed{t: t, db: db, dsn: dsn, topic: topic, group: testbed.Name(t, "cg")}
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Hooks: txmsg.Hooks{b}})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	require.NoError(t, db.AutoMigrate(&consumerEffect{}))
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "pg")})
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	b.inbox, b.pub = inbox, pub
	return b
}

func (b *consumerBed) config() txrmq.ConsumerConfig {
	return txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: b.group,
		RetryDelayLevel: 1, // 1 s between attempts keeps retry tests short
	}
}

// start starts a consumer of the bed's group with route and closes it when
// the test ends.
func (b *consumerBed) start(cfg txrmq.ConsumerConfig, route txmsg.Route) *txrmq.Consumer {
	b.t.Helper()
	c, err := txrmq.NewConsumer(b.inbox, []txmsg.Route{route}, cfg)
	require.NoError(b.t, err)
	require.NoError(b.t, c.Start(context.Background()))
	b.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func (b *consumerBed) topicOf() txmsg.Topic[consumerEvent] {
	return txmsg.Topic[consumerEvent]{Name: b.topic}
}

// message builds a message carrying ev with a fresh txmsg ID.
func (b *consumerBed) message(ev consumerEvent) *txmsg.Message {
	body, err := txmsg.JSONCodec[consumerEvent]{}.Encode(ev)
	require.NoError(b.t, err)
	return &txmsg.Message{ID: txmsg.NewID(), Topic: b.topic, Body: body}
}

func (b *consumerBed) publish(msgs ...*txmsg.Message) {
	b.t.Helper()
	require.NoError(b.t, b.pub.Publish(context.Background(), msgs...))
}

// of returns the OnConsumed calls for message id.
func (b *consumerBed) of(id string) []consumerSeen {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []consumerSeen
	for _, s := range b.seen {
		if s.id == id {
			out = append(out, s)
		}
	}
	return out
}

func (b *consumerBed) handled(id string) bool {
	for _, s := range b.of(id) {
		if s.err == nil && s.outcome == txmsg.OutcomeHandled {
			return true
		}
	}
	return false
}

func (b *consumerBed) count(q *gorm.DB) int64 {
	b.t.Helper()
	var n int64
	require.NoError(b.t, q.Count(&n).Error)
	return n
}

func (b *consumerBed) inboxRows(id string) int64 {
	table, _ := b.inbox.Tables()
	return b.count(b.db.Table(table).Where("consumer_group = ? AND msg_id = ?", b.group, id))
}

func (b *consumerBed) effects(id string) int64 {
	return b.count(b.db.Model(&consumerEffect{}).Where("event_id = ?", id))
}

const (
	consumerWait = 30 * time.Second
	consumerTick = 50 * time.Millisecond
)

func TestConsumerDropsDuplicates(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	var runs atomic.Int32
	b.start(b.config(), txmsg.Handle(b.topicOf(), func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
		runs.Add(1)
		return tx.Create(&consumerEffect{EventID: d.Message.ID, Part: 1}).Error
	}))

	m := b.message(consumerEvent{N: 1})
	for i := 0; i < 3; i++ {
		b.publish(m.Clone()) // three broker messages, one txmsg ID
	}
	require.Eventually(t, func() bool { return len(b.of(m.ID)) == 3 }, consumerWait, consumerTick)

	outcomes := map[txmsg.Outcome]int{}
	for _, s := range b.of(m.ID) {
		require.NoError(t, s.err)
		outcomes[s.outcome]++
	}
	require.Equal(t, map[txmsg.Outcome]int{txmsg.OutcomeHandled: 1, txmsg.OutcomeDuplicate: 2}, outcomes)
	require.EqualValues(t, 1, runs.Load(), "the handler ran once")
	require.EqualValues(t, 1, b.inboxRows(m.ID))
	require.EqualValues(t, 1, b.effects(m.ID))
}

// Two messages whose txmsg IDs differ only in case both run the handler,
// whatever the database's default collation.
func TestConsumerIDsDifferingInCaseBothHandled(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t, testbed.ServerDefaults())
	var runs atomic.Int32
	b.start(b.config(), txmsg.Handle(b.topicOf(), func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
		runs.Add(1)
		return tx.Create(&consumerEffect{EventID: d.Message.ID, Part: d.Event.N}).Error
	}))
	upper := b.message(consumerEvent{N: 1})
	upper.ID = "Order-" + testbed.Suffix()
	lower := b.message(consumerEvent{N: 2})
	lower.ID = strings.ToLower(upper.ID)
	b.publish(upper, lower)

	require.Eventually(t, func() bool { return len(b.of(upper.ID)) > 0 && len(b.of(lower.ID)) > 0 }, consumerWait, consumerTick)
	for _, m := range []*txmsg.Message{upper, lower} {
		seen := b.of(m.ID)
		require.Len(t, seen, 1, m.ID)
		require.NoError(t, seen[0].err, m.ID)
		require.Equal(t, txmsg.OutcomeHandled, seen[0].outcome, m.ID)
	}
	require.EqualValues(t, 2, runs.Load())
	var parts []int
	require.NoError(t, b.db.Model(&consumerEffect{}).Where("event_id IN ?", []string{upper.ID, lower.ID}).Order("part").Pluck("part", &parts).Error)
	require.Equal(t, []int{1, 2}, parts)
}

func TestConsumerRedeliversFailedHandler(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	var mu sync.Mutex
	var attempts []int
	b.start(b.config(), txmsg.Handle(b.topicOf(), func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
		mu.Lock()
		attempts = append(attempts, d.Attempt)
		mu.Unlock()
		// The effect is written before the failure: it must roll back.
		if err := tx.Create(&consumerEffect{EventID: d.Message.ID, Part: d.Attempt}).Error; err != nil {
			return err
		}
		if d.Attempt < 3 {
			return fmt.Errorf("attempt %d fails", d.Attempt)
		}
		return nil
	}))

	m := b.message(consumerEvent{N: 1})
	begin := time.Now()
	b.publish(m)
	require.Eventually(t, func() bool { return b.handled(m.ID) }, consumerWait, consumerTick)
	t.Logf("handled on the third attempt after %v (RetryDelayLevel 1)", time.Since(begin).Round(time.Millisecond))

	mu.Lock()
	require.Equal(t, []int{1, 2, 3}, attempts)
	mu.Unlock()
	seen := b.of(m.ID)
	require.Len(t, seen, 3)
	for i, s := range seen[:2] {
		require.Error(t, s.err, "attempt %d", i+1)
	}
	require.EqualValues(t, 1, b.effects(m.ID))
	var part int
	require.NoError(t, b.db.Model(&consumerEffect{}).Where("event_id = ?", m.ID).Pluck("part", &part).Error)
	require.Equal(t, 3, part, "only the third attempt's writes committed")
	require.EqualValues(t, 1, b.inboxRows(m.ID))
}

func TestConsumerParksPoisonMessage(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	b.start(b.config(), txmsg.Handle(b.topicOf(), func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
		return tx.Create(&consumerEffect{EventID: d.Message.ID, Part: 1}).Error
	}))

	raw := []byte("\xff{not json")
	poison := &txmsg.Message{ID: txmsg.NewID(), Topic: b.topic, Body: raw}
	b.publish(poison)
	var later []*txmsg.Message
	for i := 0; i < 3; i++ {
		m := b.message(consumerEvent{N: i})
		later = append(later, m)
		b.publish(m)
	}
	for _, m := range later {
		require.Eventually(t, func() bool { return b.handled(m.ID) }, consumerWait, consumerTick, "later messages keep flowing")
	}
	require.Eventually(t, func() bool { return len(b.of(poison.ID)) > 0 }, consumerWait, consumerTick)

	seen := b.of(poison.ID)
	require.NoError(t, seen[0].err, "a parked message is acknowledged")
	require.Equal(t, txmsg.OutcomeParked, seen[0].outcome)
	require.Equal(t, 1, seen[0].attempt)

	_, deadTable := b.inbox.Tables()
	var rows []txmsg.ParkedRow
	require.NoError(t, b.db.Table(deadTable).Where("msg_id = ?", poison.ID).Find(&rows).Error)
	require.Len(t, rows, 1)
	require.Equal(t, raw, rows[0].Body)
	require.Equal(t, b.group, rows[0].ConsumerGroup)
	require.Equal(t, b.topic, rows[0].Topic)
	require.NotEmpty(t, rows[0].BrokerMessageID)
	require.Contains(t, rows[0].Error, "cannot decode")
	require.Zero(t, b.effects(poison.ID))
	require.Zero(t, b.inboxRows(poison.ID))

	// Had it been answered "retry later", it would be back within about a
	// second (RetryDelayLevel 1).
	require.Never(t, func() bool { return len(b.of(poison.ID)) > 1 }, 2500*time.Millisecond, 100*time.Millisecond)
}

// panickyCodec panics the first time it decodes an event whose key is
// "codec-panic": a panic outside the handler, where the inbox does not
// recover.
type panickyCodec struct {
	txmsg.JSONCodec[consumerEvent]
	fired *atomic.Bool
}

func (c panickyCodec) Decode(body []byte) (consumerEvent, error) {
	ev, err := c.JSONCodec.Decode(body)
	if err == nil && ev.Key == "codec-panic" && c.fired.CompareAndSwap(false, true) {
		panic("codec exploded")
	}
	return ev, err
}

func TestConsumerSurvivesPanics(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	topic := txmsg.Topic[consumerEvent]{Name: b.topic, Codec: panickyCodec{fired: new(atomic.Bool)}}
	b.start(b.config(), txmsg.Handle(topic, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
		if err := tx.Create(&consumerEffect{EventID: d.Message.ID, Part: d.Attempt}).Error; err != nil {
			return err
		}
		if d.Event.Key == "handler-panic" && d.Attempt == 1 {
			panic(errors.New("handler exploded"))
		}
		return nil
	}))

	inHandler := b.message(consumerEvent{Key: "handler-panic"})
	inCodec := b.message(consumerEvent{Key: "codec-panic"})
	b.publish(inHandler, inCodec)
	for _, m := range []*txmsg.Message{inHandler, inCodec} {
		require.Eventually(t, func() bool { return b.handled(m.ID) }, consumerWait, consumerTick)
		require.EqualValues(t, 1, b.effects(m.ID), "the panicking attempt rolled back")
	}
	// Both panics are recovered and reported to the inbox's hooks as a
	// *txmsg.PanicError (the handler's inside its transaction, the
	// codec's around the route), and the message is delivered again.
	seen := b.of(inHandler.ID)
	require.Len(t, seen, 2, "one panic, then redelivered once")
	var pe *txmsg.PanicError
	require.ErrorAs(t, seen[0].err, &pe)
	require.ErrorContains(t, seen[0].err, "handler exploded")
	require.Equal(t, 1, seen[0].attempt)
	require.Equal(t, 2, seen[1].attempt)
	seen = b.of(inCodec.ID)
	require.Len(t, seen, 2, "the codec's panic, then redelivered once")
	require.ErrorAs(t, seen[0].err, &pe)
	require.ErrorContains(t, seen[0].err, "codec exploded")
	require.Equal(t, 1, seen[0].attempt)
	require.Equal(t, 2, seen[1].attempt, "redelivered after the codec's panic")

	after := b.message(consumerEvent{N: 2})
	b.publish(after)
	require.Eventually(t, func() bool { return b.handled(after.ID) }, consumerWait, consumerTick, "the consumer keeps running")
}

func TestConsumerShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	const total = 500
	b := newConsumerBed(t)
	ctx := context.Background()

	// Each handler writes two rows with a pause between them, so a close
	// finds transactions half-way; both rows or neither may survive.
	var handled atomic.Int32
	handler := func(running *atomic.Int32) txmsg.Handler[consumerEvent] {
		return func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
			running.Add(1)
			defer running.Add(-1)
			if err := tx.Create(&consumerEffect{EventID: d.Message.ID, Part: 1}).Error; err != nil {
				return err
			}
			if err := tx.Exec("DO SLEEP(0.02)").Error; err != nil {
				return err
			}
			if err := tx.Create(&consumerEffect{EventID: d.Message.ID, Part: 2}).Error; err != nil {
				return err
			}
			handled.Add(1)
			return nil
		}
	}

	msgs := make([]*txmsg.Message, total)
	for i := range msgs {
		msgs[i] = b.message(consumerEvent{N: i})
	}
	b.publish(msgs...)

	// First consumer: closed gracefully while handlers run.
	var running1 atomic.Int32
	c1, err := txrmq.NewConsumer(b.inbox, []txmsg.Route{txmsg.Handle(b.topicOf(), handler(&running1))}, b.config())
	require.NoError(t, err)
	require.NoError(t, c1.Start(ctx))
	require.Eventually(t, func() bool { return handled.Load() >= 100 }, consumerWait, 10*time.Millisecond)
	require.Positive(t, running1.Load(), "handlers are in flight when Close begins")
	closeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	require.NoError(t, c1.Close(closeCtx))
	cancel()
	require.Zero(t, running1.Load(), "a graceful Close waits for running handlers")
	t.Logf("first consumer closed after %d handled", handled.Load())

	// Second consumer: Close gives up at once, cancelling running handlers.
	var running2 atomic.Int32
	c2, err := txrmq.NewConsumer(b.inbox, []txmsg.Route{txmsg.Handle(b.topicOf(), handler(&running2))}, b.config())
	require.NoError(t, err)
	require.NoError(t, c2.Start(ctx))
	require.Eventually(t, func() bool { return handled.Load() >= 250 }, consumerWait, 10*time.Millisecond)
	closeCtx, cancel = context.WithTimeout(ctx, time.Millisecond)
	err = c2.Close(closeCtx)
	cancel()
	if err != nil {
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	t.Logf("second consumer closed after %d handled (close: %v)", handled.Load(), err)

	// Third consumer: drains the rest.
	var running3 atomic.Int32
	b.start(b.config(), txmsg.Handle(b.topicOf(), handler(&running3)))
	var distinct int64
	require.Eventually(t, func() bool {
		distinct = b.count(b.db.Model(&consumerEffect{}).Where("part = 2").Distinct("event_id"))
		return distinct == total
	}, 60*time.Second, 100*time.Millisecond, "every event applied in the end")
	require.Eventually(t, func() bool { return running2.Load() == 0 && running3.Load() == 0 }, consumerWait, consumerTick)

	require.EqualValues(t, 2*total, b.count(b.db.Model(&consumerEffect{})), "no effect applied twice, none half-applied")
	var broken int64
	require.NoError(t, b.db.Raw(`SELECT COUNT(*) FROM (SELECT event_id FROM consumer_effects
		GROUP BY event_id HAVING COUNT(*) <> 2 OR MIN(part) <> 1 OR MAX(part) <> 2) x`).Scan(&broken).Error)
	require.Zero(t, broken)
	table, _ := b.inbox.Tables()
	require.EqualValues(t, total, b.count(b.db.Table(table).Where("consumer_group = ?", b.group)))
}

func TestConsumerStartFailsForUnknownTopic(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	inbox, err := txmsg.NewInbox(&gorm.DB{}, txmsg.InboxConfig{})
	require.NoError(t, err)
	topic := testbed.Name(t, "missing")
	c, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[consumerEvent]{Name: topic}, noopConsumerHandler)}, txrmq.ConsumerConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "cg")})
	require.NoError(t, err)
	err = c.Start(context.Background())
	require.ErrorContains(t, err, topic)
	require.Equal(t, err, c.Start(context.Background()), "a failed consumer stays failed")
	require.NoError(t, c.Close(context.Background()))
}

func noopConsumerHandler(context.Context, *gorm.DB, txmsg.Delivery[consumerEvent]) error { return nil }

func TestConsumerConfigErrors(t *testing.T) {
	t.Parallel()
	inbox, err := txmsg.NewInbox(&gorm.DB{}, txmsg.InboxConfig{})
	require.NoError(t, err)
	route := txmsg.Handle(txmsg.Topic[consumerEvent]{Name: "orders"}, noopConsumerHandler)
	valid := func() txrmq.ConsumerConfig {
		return txrmq.ConsumerConfig{Conn: txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}, Group: "g"}
	}
	tests := []struct {
		name     string
		change   func(*txrmq.ConsumerConfig)
		nilInbox bool
		routes   []txmsg.Route // nil means one valid route
		want     string
	}{
		{name: "no name servers", change: func(c *txrmq.ConsumerConfig) { c.NameServers = nil }, want: "NameServers is empty"},
		{name: "bad name server", change: func(c *txrmq.ConsumerConfig) { c.NameServers = []string{"localhost"} }, want: "not host:port"},
		{name: "no group", change: func(c *txrmq.ConsumerConfig) { c.Group = "" }, want: "Group"},
		{name: "bad group", change: func(c *txrmq.ConsumerConfig) { c.Group = "a b" }, want: "Group"},
		{name: "half credentials", change: func(c *txrmq.ConsumerConfig) { c.AccessKey = "ak" }, want: "AccessKey and SecretKey"},
		{name: "negative concurrency", change: func(c *txrmq.ConsumerConfig) { c.Concurrency = -1 }, want: "Concurrency"},
		{name: "huge concurrency", change: func(c *txrmq.ConsumerConfig) { c.Concurrency = 100000 }, want: "Concurrency"},
		{name: "negative reconsume", change: func(c *txrmq.ConsumerConfig) { c.MaxReconsumeTimes = -1 }, want: "MaxReconsumeTimes"},
		{name: "negative delay level", change: func(c *txrmq.ConsumerConfig) { c.RetryDelayLevel = -1 }, want: "RetryDelayLevel"},
		{name: "nil inbox", nilInbox: true, want: "inbox is nil"},
		{name: "no routes", routes: []txmsg.Route{}, want: "no routes"},
		{name: "empty route", routes: []txmsg.Route{{}}, want: "route 0"},
		{name: "nil handler", routes: []txmsg.Route{txmsg.Handle[consumerEvent](txmsg.Topic[consumerEvent]{Name: "orders"}, nil)}, want: `handler for topic "orders" is nil`},
		{name: "bad topic", routes: []txmsg.Route{txmsg.Handle(txmsg.Topic[consumerEvent]{Name: "bad topic"}, noopConsumerHandler)}, want: "bad topic"},
		{name: "system topic", routes: []txmsg.Route{txmsg.Handle(txmsg.Topic[consumerEvent]{Name: "%DLQ%g"}, noopConsumerHandler)}, want: "reserved"},
		{name: "empty tags", routes: []txmsg.Route{txmsg.Handle(txmsg.Topic[consumerEvent]{Name: "orders"}, noopConsumerHandler, txmsg.WithTags(" "))}, want: "tag expression"},
		{name: "two routes, one topic", routes: []txmsg.Route{route, route}, want: `two routes for topic "orders"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid()
			if tc.change != nil {
				tc.change(&cfg)
			}
			in := inbox
			if tc.nilInbox {
				in = nil
			}
			routes := tc.routes
			if routes == nil {
				routes = []txmsg.Route{route}
			}
			c, err := txrmq.NewConsumer(in, routes, cfg)
			require.Nil(t, c)
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestConsumerClosedBeforeStart(t *testing.T) {
	t.Parallel()
	testbed.QuietClientLogs() // before NewConsumer sets the client's global logger
	inbox, err := txmsg.NewInbox(&gorm.DB{}, txmsg.InboxConfig{})
	require.NoError(t, err)
	c, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[consumerEvent]{Name: "orders"}, noopConsumerHandler)}, txrmq.ConsumerConfig{Conn: txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}, Group: "g"})
	require.NoError(t, err)
	require.NoError(t, c.Close(context.Background()))
	require.NoError(t, c.Close(context.Background()), "Close is idempotent")
	require.ErrorIs(t, c.Start(context.Background()), txmsg.ErrClosed)
}

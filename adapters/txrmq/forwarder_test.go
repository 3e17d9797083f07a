package txrmq

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// TestNextHop: the level chaining of DelayLevels mode takes the largest
// level not past the due time, and waits out less than the smallest level
// before sending the message on.
func TestNextHop(t *testing.T) {
	levels := DefaultDelayLevels
	for _, c := range []struct {
		left  time.Duration
		level int
		wait  time.Duration
	}{
		{-time.Second, 0, 0},
		{0, 0, 0},
		{300 * time.Millisecond, 0, 300 * time.Millisecond},
		{999 * time.Millisecond, 0, 999 * time.Millisecond},
		{time.Second, 1, 0},
		{4999 * time.Millisecond, 1, 0},
		{5 * time.Second, 2, 0},
		{6 * time.Second, 2, 0},
		{59 * time.Second, 4, 0},
		{30 * time.Minute, 16, 0},
		{31 * time.Minute, 16, 0},
		{90 * time.Minute, 17, 0},
		{2 * time.Hour, 18, 0},
		{txmsg.MaxDelay, 18, 0},
	} {
		level, wait := nextHop(c.left, levels)
		require.Equal(t, c.level, level, "left %v", c.left)
		require.Equal(t, c.wait, wait, "left %v", c.left)
		if level > 0 {
			require.LessOrEqual(t, levels[level-1], c.left, "never past the due time")
		}
	}
	// A whole chain: the hops add up to the delay without passing it, and
	// a 3-day delay takes 36 two-hour hops and a few smaller ones.
	for _, d := range []time.Duration{1500 * time.Millisecond, 6 * time.Second, 30 * time.Minute, 47*time.Minute + 13*time.Second + 400*time.Millisecond, txmsg.MaxDelay} {
		left, hops := d, 0
		for {
			level, wait := nextHop(left, levels)
			if level == 0 {
				require.Less(t, wait, time.Second)
				break
			}
			left -= levels[level-1]
			hops++
			require.GreaterOrEqual(t, left, time.Duration(0))
		}
		require.LessOrEqual(t, hops, 60, "hops for %v", d)
	}
	// A broker with other levels.
	level, _ := nextHop(90*time.Second, []time.Duration{10 * time.Second, time.Minute})
	require.Equal(t, 2, level)
}

// TestTimerHop: the broker puts a message in the timer slot of
// TIMER_DELIVER_MS rounded down to its precision (an exact multiple one
// step further down) and fires a slot once the clock has passed its end:
// what the forwarder asks for fires before the due time by at least
// timerLead and at most precision+timerLead, and when that is not possible
// any more the forwarder waits instead.
func TestTimerHop(t *testing.T) {
	brokerFires := func(ms, p int64) int64 {
		slot := ms / p * p
		if ms%p == 0 {
			slot -= p
		}
		return slot + p
	}
	now := time.UnixMilli(1_700_000_000_000)
	for _, left := range []time.Duration{1400 * time.Millisecond, 1301 * time.Millisecond, 2 * time.Second,
		2*time.Second + 300*time.Millisecond + 300*time.Microsecond, 7*time.Second + 999*time.Millisecond, txmsg.MaxDelay} {
		due := now.Add(left)
		for _, p := range []time.Duration{time.Millisecond, 100 * time.Millisecond, time.Second} {
			at, hop := timerHop(now, due, p)
			if left <= p+timerLead {
				require.False(t, hop, "left %v precision %v", left, p)
				continue
			}
			require.True(t, hop, "left %v precision %v", left, p)
			fires := time.UnixMilli(brokerFires(at, p.Milliseconds()))
			require.LessOrEqual(t, fires, due.Add(-timerLead), "left %v precision %v: back before the due time", left, p)
			require.Greater(t, fires, due.Add(-p-timerLead-time.Millisecond), "left %v precision %v: at most one step early", left, p)
		}
	}
	_, hop := timerHop(now, now.Add(time.Second+timerLead), time.Second)
	require.False(t, hop, "exactly precision+timerLead left: wait")
}

func TestTimerBroker(t *testing.T) {
	require.True(t, timerBroker("V5_3_3"))
	require.True(t, timerBroker("V6_0_0"))
	require.False(t, timerBroker("V4_9_7"))
	require.False(t, timerBroker(""))
}

// TestBrokerVersionOfTheTestBroker: the forwarder reads the test broker's
// version, and DelayAuto picks the mode for it.
func TestBrokerVersionOfTheTestBroker(t *testing.T) {
	testbed.RequireBroker(t)
	f := newForwarder(t, testbed.Topic(t), DelayAuto)
	mode, why := f.detect(context.Background())
	t.Logf("mode %s: %s", mode, why)
	want := DelayLevels
	if brokerLine(t) >= 5 {
		want = DelayTimer
	}
	require.Equal(t, want, mode)
}

func fwdLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// brokerLine is the test broker's major version.
func brokerLine(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := brokerVersion(ctx, testbed.Broker(), false)
	require.NoError(t, err)
	if timerBroker(v) {
		return 5
	}
	return 4
}

// newForwarder builds a forwarder of delayTopic, not started.
func newForwarder(t *testing.T, delayTopic string, mode DelayMode) *Forwarder {
	t.Helper()
	f, err := NewForwarder(ForwarderConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: fwdLogger(t)},
		Group: testbed.Name(t, "fwd"), Topic: delayTopic, Mode: mode})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

// arrivals records when each txmsg ID first arrived.
type arrivals struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (a *arrivals) record(m *primitive.MessageExt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := m.GetProperty(txmsg.PropertyID)
	if _, ok := a.at[id]; !ok {
		a.at[id] = time.Now()
	}
}

func (a *arrivals) get(id string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at[id]
}

// TestTransactionalDelayed: in both delay modes, a delayed transactional
// event reaches its topic no earlier than its due time and at most about
// a second after; a rolled-back one never arrives; an invalid delay fails
// before anything is sent or written. The broker's timer is 5.x only, so
// the timer case runs on 5.x test brokers; delay levels run on both lines.
func TestTransactionalDelayed(t *testing.T) {
	for _, c := range []struct {
		mode  DelayMode
		delay time.Duration
	}{{DelayTimer, 3 * time.Second}, {DelayLevels, 6500 * time.Millisecond}} {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			e := newTxEnv(t)
			if c.mode == DelayTimer && brokerLine(t) < 5 {
				t.Skip("the broker's timer needs RocketMQ 5")
			}
			delayTopic := testbed.Topic(t)
			cfg := e.config(fwdLogger(t))
			cfg.DelayTopic = delayTopic
			tr, err := NewTransactional(e.db, e.chk, cfg)
			require.NoError(t, err)
			require.NoError(t, tr.Start(context.Background()))
			t.Cleanup(func() { _ = tr.Close(context.Background()) })
			f := newForwarder(t, delayTopic, c.mode)
			require.NoError(t, f.Start(context.Background()))
			arr := &arrivals{at: map[string]time.Time{}}
			obs := testbed.Observe(t, e.topic, func(m *primitive.MessageExt) error { arr.record(m); return nil })
			p, err := txmsg.NewProducer(tr, txmsg.Topic[string]{Name: e.topic})
			require.NoError(t, err)

			_, err = p.Send(context.Background(), "bad", createOrder("bad"), txmsg.WithDelay(-time.Second))
			require.ErrorIs(t, err, txmsg.ErrInvalidMessage)
			_, err = p.Send(context.Background(), "bad", createOrder("bad"), txmsg.WithDeliverAt(time.Now().Add(-time.Minute)))
			require.ErrorIs(t, err, txmsg.ErrInvalidMessage)
			require.Zero(t, e.orders(t), "no local transaction ran")

			sent := time.Now()
			r, err := p.Send(context.Background(), "delayed", createOrder("delayed"), txmsg.WithDelay(c.delay), txmsg.WithKeys("order-1"))
			require.NoError(t, err)
			require.Equal(t, txmsg.StateCommitted, r.State)
			rb, err := p.Send(context.Background(), "rolled back", func(context.Context, *gorm.DB) error { return errors.New("no") }, txmsg.WithDelay(c.delay))
			require.Error(t, err)
			require.Equal(t, txmsg.StateRolledBack, rb.State)

			obs.NeverDelivered(t, r.ID, c.delay-time.Since(sent)-300*time.Millisecond)
			obs.DeliveredWithin(t, r.ID, 15*time.Second)
			late := arr.get(r.ID).Sub(sent.Add(c.delay))
			t.Logf("%s: arrived %v after its due time", c.mode, late)
			require.GreaterOrEqual(t, late, -20*time.Millisecond, "not before its due time (one host clock)")
			// The forwarder sends the event on at its due time, in both modes.
			require.Less(t, late, 2*time.Second, "late by the sending time, not by seconds")
			got := fromExt(obs.First(r.ID))
			require.Equal(t, e.topic, got.Message.Topic)
			require.Equal(t, "order-1", got.Message.Keys[0])
			for _, k := range brokerTimerProperties {
				require.NotContains(t, got.Message.Properties, k, "the broker's timer properties are not passed on")
			}
			require.WithinDuration(t, sent.Add(c.delay), got.DueAt, time.Second)
			require.Never(t, func() bool { return obs.Count(rb.ID) > 0 }, 2*time.Second, 100*time.Millisecond, "the rolled-back event never arrives")
			n, chained := f.Forwarded()
			require.EqualValues(t, 1, n)
			require.Positive(t, chained, "chained through the delay topic")
		})
	}
}

// TestForwarderTimerLateness: with the broker's timer, delayed events
// due at every fraction of a second arrive none before its due time and,
// on an idle broker, 99 % of them within a second after it (the p50, p99
// and max are logged).
func TestForwarderTimerLateness(t *testing.T) {
	e := newTxEnv(t)
	if brokerLine(t) < 5 {
		t.Skip("the broker's timer needs RocketMQ 5")
	}
	delayTopic := testbed.Topic(t)
	cfg := e.config(fwdLogger(t))
	cfg.DelayTopic = delayTopic
	tr, err := NewTransactional(e.db, e.chk, cfg)
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	f := newForwarder(t, delayTopic, DelayTimer)
	require.NoError(t, f.Start(context.Background()))
	arr := &arrivals{at: map[string]time.Time{}}
	obs := testbed.Observe(t, e.topic, func(m *primitive.MessageExt) error { arr.record(m); return nil })
	p, err := txmsg.NewProducer(tr, txmsg.Topic[string]{Name: e.topic})
	require.NoError(t, err)

	const n = 40
	due := map[string]time.Time{}
	for i := range n {
		at := time.Now().Add(2*time.Second + time.Duration(i)*73*time.Millisecond)
		r, err := p.Send(context.Background(), "delayed", createOrder(strconv.Itoa(i)), txmsg.WithDeliverAt(at))
		require.NoError(t, err)
		due[r.ID] = at
	}
	late := make([]time.Duration, 0, n)
	for id, at := range due {
		obs.DeliveredWithin(t, id, 20*time.Second)
		l := arr.get(id).Sub(at)
		require.GreaterOrEqual(t, l, time.Duration(0), "never before its due time")
		late = append(late, l)
	}
	slices.Sort(late)
	p50, p99 := late[len(late)/2], late[(len(late)*99+99)/100-1]
	t.Logf("timer lateness over %d events: p50 %v p99 %v max %v", n, p50, p99, late[len(late)-1])
	require.LessOrEqual(t, p99, time.Second, "p99 lateness")
}

// TestForwarderRedeliveryIsDeduped: the forwarder fails after sending a
// message on and before acknowledging it (as on a crash): the broker
// delivers it to the forwarder again, which sends it again; a consumer
// deduping through the inbox applies the event once.
func TestForwarderRedeliveryIsDeduped(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	delayTopic := testbed.Topic(t)
	cfg := e.config(fwdLogger(t))
	cfg.DelayTopic = delayTopic
	tr, err := NewTransactional(e.db, e.chk, cfg)
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })

	inbox, err := txmsg.NewInbox(e.db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(context.Background()))
	require.NoError(t, e.db.Exec("CREATE TABLE effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_id VARCHAR(64) NOT NULL)").Error)
	group := testbed.Name(t, "dedupe")
	obs := testbed.Observe(t, e.topic, func(m *primitive.MessageExt) error {
		id := m.GetProperty(txmsg.PropertyID)
		_, err := driver.Run(inbox, context.Background(), group, m.Topic, id, func(ctx context.Context, tx *gorm.DB) error {
			return tx.Exec("INSERT INTO effects (msg_id) VALUES (?)", id).Error
		})
		return err
	})

	f := newForwarder(t, delayTopic, DelayAuto)
	var failed atomic.Int32
	f.afterSend = func() error {
		if failed.Add(1) == 1 {
			return errors.New("forwarder killed after sending")
		}
		return nil
	}
	require.NoError(t, f.Start(context.Background()))
	p, err := txmsg.NewProducer(tr, txmsg.Topic[string]{Name: e.topic})
	require.NoError(t, err)
	r, err := p.Send(context.Background(), "once", createOrder("once"), txmsg.WithDelay(time.Second))
	require.NoError(t, err)

	require.Eventually(t, func() bool { return obs.Count(r.ID) >= 2 }, 60*time.Second, 100*time.Millisecond, "sent on twice")
	var effects int64
	require.NoError(t, e.db.Table("effects").Where("msg_id = ?", r.ID).Count(&effects).Error)
	require.EqualValues(t, 1, effects)
}

// TestForwarderRestart: delayed messages that fall due while no forwarder
// runs wait in the delay topic; the group's next forwarder sends them on
// at once, nothing lost.
func TestForwarderRestart(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	delayTopic := testbed.Topic(t)
	cfg := e.config(fwdLogger(t))
	cfg.DelayTopic = delayTopic
	tr, err := NewTransactional(e.db, e.chk, cfg)
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	obs := testbed.Observe(t, e.topic, nil)

	fcfg := ForwarderConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: fwdLogger(t)},
		Group: testbed.Name(t, "fwd"), Topic: delayTopic}
	first, err := NewForwarder(fcfg)
	require.NoError(t, err)
	require.NoError(t, first.Start(context.Background()))
	require.NoError(t, first.Close(context.Background()), "the forwarder stops")

	p, err := txmsg.NewProducer(tr, txmsg.Topic[string]{Name: e.topic})
	require.NoError(t, err)
	var ids []string
	for i := range 5 {
		r, err := p.Send(context.Background(), "while down", createOrder("down"+strconv.Itoa(i)), txmsg.WithDelay(time.Second))
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	time.Sleep(2 * time.Second)
	require.Zero(t, obs.Distinct(), "nothing goes out without a forwarder")

	second, err := NewForwarder(fcfg)
	require.NoError(t, err)
	require.NoError(t, second.Start(context.Background()))
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	for _, id := range ids {
		obs.DeliveredWithin(t, id, 30*time.Second)
	}
}

// TestForwarderCloseLeavesNothingRunning: after forwarding, Close ends
// every goroutine the Forwarder started, those of its two client
// instances (the consumer and its publisher) included. Not parallel: it
// counts goroutines.
func TestForwarderCloseLeavesNothingRunning(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "it counts goroutines after Close, which no collation or isolation level changes")
	e := newTxEnv(t)
	ctx := context.Background()
	delayTopic := testbed.Topic(t)
	inbox, err := txmsg.NewInbox(e.db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	base := goroutineStacks()

	var handled atomic.Int64
	route := txmsg.Handle(txmsg.Topic[struct{}]{Name: e.topic}, func(context.Context, *gorm.DB, txmsg.Delivery[struct{}]) error {
		handled.Add(1)
		return nil
	})
	cons, err := NewConsumer(inbox, []txmsg.Route{route}, ConsumerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "cg")})
	require.NoError(t, err)
	require.NoError(t, cons.Start(ctx))
	cfg := e.config(fwdLogger(t))
	cfg.DelayTopic = delayTopic
	tr, err := NewTransactional(e.db, e.chk, cfg)
	require.NoError(t, err)
	require.NoError(t, tr.Start(ctx))
	f, err := NewForwarder(ForwarderConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: fwdLogger(t)},
		Group: testbed.Name(t, "fwd"), Topic: delayTopic, Mode: DelayLevels})
	require.NoError(t, err)
	require.NoError(t, f.Start(ctx))
	_, err = tr.Transact(ctx, &txmsg.Message{Topic: e.topic, Body: []byte(`{}`), Delay: 1500 * time.Millisecond}, createOrder("leak"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 30*time.Second, 50*time.Millisecond)

	require.NoError(t, f.Close(ctx))
	require.NoError(t, f.Close(ctx), "Close is idempotent")
	require.ErrorIs(t, f.Start(ctx), txmsg.ErrClosed)
	require.NoError(t, tr.Close(ctx))
	require.NoError(t, cons.Close(ctx))

	// Client instances: the consumer, the transactional producer, and the
	// forwarder's consumer and publisher.
	const clients = 4
	left := newGoroutines(base, clients)
	for deadline := time.Now().Add(60 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = newGoroutines(base, clients) {
		time.Sleep(200 * time.Millisecond)
	}
	require.Empty(t, left, "goroutines left running after Close:\n%s", strings.Join(left, "\n\n"))
}

// TestTimerRefused: the broker's answers that refuse a timer (5.x
// SendMessageProcessor) send the message through the delay levels;
// timer flow control and other failures are retried as they are.
func TestTimerRefused(t *testing.T) {
	require.True(t, timerRefused(errors.New("send to t: txmsg: rejected: CODE: 1  DESC: accurate timer message is not enabled, timerWheelEnable is false")))
	require.True(t, timerRefused(errors.New("CODE: 13  DESC: timer message illegal, the delay time should not be bigger than the max delay 3600000ms")))
	require.False(t, timerRefused(errors.New("CODE: 1  DESC: timer message is under flow control, max num limit is 14000")))
	require.False(t, timerRefused(errors.New("connection refused")))
}

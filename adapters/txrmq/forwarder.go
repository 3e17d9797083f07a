package txrmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/heartbeat"
	"github.com/txmsg/txmsg/internal/rmqwire"
	"github.com/txmsg/txmsg/txmsg"
)

// DefaultDelayTopic is the topic delayed transactional messages wait in
// ([TransactionalConfig.DelayTopic], [ForwarderConfig.Topic]). Create it
// like any other topic (txmsgctl topic create TXMSG_DELAYED).
const DefaultDelayTopic = "TXMSG_DELAYED"

// DelayMode is how a [Forwarder] makes the broker wait.
type DelayMode string

const (
	// DelayAuto picks DelayTimer when every broker of the name servers'
	// clusters is RocketMQ 5.x or later, DelayLevels otherwise (or when
	// the brokers cannot be asked). Decided at Start.
	DelayAuto DelayMode = ""
	// DelayTimer sends a message back through the delay topic with the
	// broker's timer (TIMER_DELIVER_MS, RocketMQ 5.x with
	// timerWheelEnable, the default), set to bring it back shortly before
	// its due time; the forwarder then waits out the rest (under
	// TimerPrecision plus 300 ms) and sends it to its topic, so that it
	// arrives at its due time plus the forwarder's sending time. A message
	// whose timer the broker refuses (timerWheelEnable off, or a
	// timerMaxDelaySec shorter than the time left) goes by the delay
	// levels instead; with the timer off, all messages do from then on.
	DelayTimer DelayMode = "timer"
	// DelayLevels chains the message through the delay topic with the
	// broker's delay levels (DELAY), each time the largest level not past
	// the due time, and sends it on to its topic when less than the
	// smallest level is left. Works on RocketMQ 4.x and 5.x.
	DelayLevels DelayMode = "levels"
)

// DefaultDelayLevels are RocketMQ's default messageDelayLevel, levels 1 to
// 18: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
var DefaultDelayLevels = []time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute,
	6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute,
	20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
}

// ForwarderConfig configures a [Forwarder].
type ForwarderConfig struct {
	Conn
	// Group is the forwarder's consumer group, and its producer group.
	// Required; stack.Transactional uses "<producer group>-delay". Keep it:
	// a new group starts at the beginning of the delay topic and sends
	// again what the broker still holds there (consumers drop the copies
	// through their inbox).
	Group string
	// Topic is the delay topic to consume. Default [DefaultDelayTopic]; it
	// must equal the transactional producers' DelayTopic.
	Topic string
	// Mode is how the broker is made to wait. Default [DelayAuto].
	Mode DelayMode
	// DelayLevels are the brokers' messageDelayLevel, level 1 first, for
	// DelayLevels mode. Default [DefaultDelayLevels]; set it when the
	// brokers' messageDelayLevel differs.
	DelayLevels []time.Duration
	// TimerPrecision is the brokers' timerPrecisionMs, for DelayTimer
	// mode. Default 1 s, the broker's default. The broker fires a timer
	// up to one precision step after the time asked for, so the forwarder
	// asks for a time this much (plus 300 ms) before the due time and
	// waits out the rest itself.
	TimerPrecision time.Duration
	// Concurrency is how many messages are forwarded at once. Default
	// [DefaultConcurrency] (16).
	Concurrency int
	// SendTimeout bounds one send. Default [DefaultSendTimeout] (3 s).
	SendTimeout time.Duration
	// Retries is how many times the client retries a failed send. Default
	// [DefaultRetries] (2).
	Retries int
	// MaxBodySize is the largest body forwarded. Default
	// [txmsg.DefaultMaxBodySize].
	MaxBodySize int
	// DB is the database of the instance table the Forwarder writes its
	// heartbeat into. Nil means no heartbeat; stack.Transactional passes
	// the service's database.
	DB *gorm.DB
	// Heartbeat is the Forwarder's row in the instance table (kind
	// fleet.KindForwarder), written from Start to Close on DB: its Health
	// and its counts (messages sent on to their topics as sent, failed
	// forwards as failed; see package fleet). Optional: the zero value
	// writes every 10 s into txmsg_instances.
	Heartbeat fleet.Config
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c ForwarderConfig) WithDefaults() ForwarderConfig {
	c.Conn = c.Conn.WithDefaults()
	if c.Topic == "" {
		c.Topic = DefaultDelayTopic
	}
	if len(c.DelayLevels) == 0 {
		c.DelayLevels = DefaultDelayLevels
	}
	if c.TimerPrecision == 0 {
		c.TimerPrecision = time.Second
	}
	c.Concurrency, _ = consumeDefaults(c.Concurrency, 0)
	c.SendTimeout, c.Retries, c.MaxBodySize = sendDefaults(c.SendTimeout, c.Retries, c.MaxBodySize)
	c.Heartbeat = c.Heartbeat.WithDefaults()
	return c
}

// Validate checks c, which WithDefaults has filled in. The error wraps
// [txmsg.ErrInvalidConfig] and names the field.
func (c ForwarderConfig) Validate() error {
	const what = "forwarder"
	if err := validateClient(what, &c.Conn, c.Group); err != nil {
		return err
	}
	if err := txmsg.ValidateTopic(c.Topic); err != nil {
		return fmt.Errorf("%w: %s: Topic: %w", txmsg.ErrInvalidConfig, what, err)
	}
	switch c.Mode {
	case DelayAuto, DelayTimer, DelayLevels:
	default:
		return fmt.Errorf("%w: %s: Mode %q: use DelayAuto, DelayTimer or DelayLevels", txmsg.ErrInvalidConfig, what, c.Mode)
	}
	for i, d := range c.DelayLevels {
		if d <= 0 || (i > 0 && d <= c.DelayLevels[i-1]) {
			return fmt.Errorf("%w: %s: DelayLevels must be positive and ascending, as the broker's messageDelayLevel", txmsg.ErrInvalidConfig, what)
		}
	}
	if c.TimerPrecision < time.Millisecond || c.TimerPrecision > time.Minute {
		return fmt.Errorf("%w: %s: TimerPrecision %v: use the brokers' timerPrecisionMs (1 ms to 1 min)", txmsg.ErrInvalidConfig, what, c.TimerPrecision)
	}
	if err := validateConsume(what, c.Concurrency, DefaultMaxReconsumeTimes); err != nil {
		return err
	}
	if err := validateSend(what, c.SendTimeout, c.Retries, c.MaxBodySize); err != nil {
		return err
	}
	return c.Heartbeat.ValidateIn(what)
}

// Forwarder sends delayed transactional messages on to their topics when
// they are due. A [Transactional] producer sends a delayed message's half
// message to its delay topic instead of the message's topic, since the
// broker does not delay half messages; when the transaction commits, the
// broker stores it in the delay topic, where the Forwarder consumes it.
// It chains it through the delay topic, with the broker's timer
// (RocketMQ 5.x) or its delay levels (4.x), until it is almost due, then
// waits out the rest and sends it on (see [DelayMode]).
//
// What the Forwarder sends keeps the message's txmsg ID, keys, tag,
// sharding key, properties and due time ([txmsg.PropertyDeliverAt]). It
// acknowledges a message only after the broker stored what it sent, so a
// crash in between sends it again: consumers drop the copy through their
// inbox. A send that fails is retried by the broker (the group's retry
// topic), up to 16 times, and then lands in %DLQ%<Group>.
//
// Run one Forwarder per service, or several: they share the delay topic's
// queues as one consumer group.
type Forwarder struct {
	cfg  ForwarderConfig
	log  *slog.Logger
	pub  *Publisher
	pc   rmq.PushConsumer
	mode atomic.Value // DelayMode
	// rc watches the delay topic's brokers once the consumer runs, as a
	// Consumer's does; expired counts the queues it re-created at a
	// broker's return.
	rc      *reconnector
	expired atomic.Int64

	forwarded, chained atomic.Int64
	counts             heartbeat.Counters
	beat               *heartbeat.Beat

	// afterSend, set by tests, runs after each successful send; an error
	// fails the message as a crash before its acknowledgement would.
	afterSend func() error

	mu      sync.Mutex
	started bool
	// consuming: the push consumer was started (Start, or later once the
	// delay topic exists).
	consuming bool
	closed    bool
	stop      chan struct{}
	wg        sync.WaitGroup
}

// NewForwarder builds a Forwarder after filling cfg's defaults and
// validating it. Call Start to run it.
func NewForwarder(cfg ForwarderConfig) (*Forwarder, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pub, err := NewPublisher(PublisherConfig{Conn: cfg.Conn, Group: cfg.Group, SendTimeout: cfg.SendTimeout,
		Retries: cfg.Retries, MaxBodySize: cfg.MaxBodySize})
	if err != nil {
		return nil, fmt.Errorf("forwarder: %w", err)
	}
	cfg.redactCredentials()
	f := &Forwarder{cfg: cfg, pub: pub, stop: make(chan struct{}),
		log: cfg.Logger.With("component", "txmsg.forwarder", "group", cfg.Group, "topic", cfg.Topic)}
	f.mode.Store(cfg.Mode)
	cc := ConsumerConfig{Conn: cfg.Conn, Group: cfg.Group, Concurrency: cfg.Concurrency}.WithDefaults()
	opts := append(consumerOptions(&cc), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if f.pc, err = rmq.NewPushConsumer(opts...); err != nil {
		return nil, fmt.Errorf("rocketmq: new forwarder: %w", err)
	}
	if err := f.pc.Subscribe(cfg.Topic, consumer.MessageSelector{}, f.consume); err != nil {
		return nil, fmt.Errorf("rocketmq: forwarder: subscribe %s: %w", cfg.Topic, err)
	}
	return f, nil
}

// Group returns the Forwarder's consumer group.
func (f *Forwarder) Group() string { return f.cfg.Group }

// Mode returns the delay mode in use: the configured one, or, with
// DelayAuto, the one Start picked (DelayAuto before Start).
func (f *Forwarder) Mode() DelayMode { return f.mode.Load().(DelayMode) }

// Forwarded returns how many messages the Forwarder sent on to their
// topics, and how many it chained through the delay topic, since
// NewForwarder. A message sent twice after a crash counts twice.
func (f *Forwarder) Forwarded() (sent, chained int64) { return f.forwarded.Load(), f.chained.Load() }

// Start picks the delay mode (see [DelayAuto]), then starts consuming the
// delay topic. When the topic does not exist yet, Start logs a warning and
// returns nil, and the Forwarder starts consuming once it exists (it looks
// every 10 s): services that send no delayed message need not create it.
// When no name server answers, Start fails.
func (f *Forwarder) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return txmsg.ErrClosed
	}
	if f.started {
		return nil
	}
	if err := f.pub.Start(ctx); err != nil {
		return fmt.Errorf("forwarder: %w", err)
	}
	if f.cfg.Mode == DelayAuto {
		mode, why := f.detect(ctx)
		f.mode.Store(mode)
		f.log.Info("forwarder delay mode", "mode", string(mode), "why", why)
	}
	err := askTopicRoutes(ctx, &f.cfg.Conn, []string{f.cfg.brokerTopic(f.cfg.Topic)})
	if errors.Is(err, txmsg.ErrTopicNotFound) {
		// Services that send no delayed messages need not create the
		// topic: the forwarder waits for it.
		f.log.Warn("the delay topic does not exist; delayed transactional messages cannot be sent until it is created, and the forwarder starts once it is", "err", err)
		f.started = true
		f.wg.Add(1)
		go f.startWhenRouted()
		f.startBeat()
		return nil
	}
	if err != nil {
		_ = f.pub.Close(ctx)
		return fmt.Errorf("rocketmq: start forwarder: %w", err)
	}
	if err := f.pc.Start(); err != nil {
		_ = f.pub.Close(ctx)
		return fmt.Errorf("rocketmq: start forwarder: %w", err)
	}
	f.started = true
	f.startConsuming()
	f.startBeat()
	return nil
}

// startConsuming records that the started consumer runs and watches the
// delay topic's brokers, as a Consumer does: after a broker restart or a
// failover the forwarder pulls again within seconds, its queues re-created
// from the offsets the broker holds, instead of on the client's 30 s
// timers. f.mu is held.
func (f *Forwarder) startConsuming() {
	f.consuming = true
	f.rc = watchConsumerBrokers(f.pc, &f.cfg.Conn, f.log, []string{f.cfg.brokerTopic(f.cfg.Topic)})
	if f.rc != nil {
		f.rc.stuck = expireStuckPulls(f.pc, f.log, &f.expired)
	}
	f.rc.start()
}

// startBeat starts the heartbeat; f.mu is held.
func (f *Forwarder) startBeat() {
	f.beat = heartbeat.Start(f.cfg.DB, f.cfg.Heartbeat, fleet.KindForwarder, f.cfg.Group, f.Health, &f.counts, f.log)
}

// Health reports whether the Forwarder can forward now: it was started
// and not closed, and the name servers answer for the delay topic. A
// delay topic that does not exist yet is healthy (the Forwarder starts
// consuming once it does, and no delayed message can be sent before).
// Bounded by ctx.
func (f *Forwarder) Health(ctx context.Context) error {
	f.mu.Lock()
	started, closed := f.started, f.closed
	f.mu.Unlock()
	if err := lifecycle("forwarder", f.cfg.Group, started, closed); err != nil {
		return err
	}
	err := askTopicRoutes(ctx, &f.cfg.Conn, []string{f.cfg.brokerTopic(f.cfg.Topic)})
	if err != nil && !errors.Is(err, txmsg.ErrTopicNotFound) {
		return fmt.Errorf("rocketmq: forwarder of group %q: %w", f.cfg.Group, err)
	}
	return nil
}

// routePoll is how often a Forwarder started before its delay topic
// existed looks for it.
const routePoll = 10 * time.Second

// startWhenRouted starts consuming once the delay topic has a route.
func (f *Forwarder) startWhenRouted() {
	defer f.wg.Done()
	t := time.NewTicker(routePoll)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.cfg.NameServerTimeout)
		err := askTopicRoutes(ctx, &f.cfg.Conn, []string{f.cfg.brokerTopic(f.cfg.Topic)})
		cancel()
		if err != nil {
			continue
		}
		f.mu.Lock()
		if !f.closed {
			if err := f.pc.Start(); err != nil {
				f.log.Error("cannot start the forwarder's consumer", "err", err)
			} else {
				f.startConsuming()
				f.log.Info("the delay topic exists; forwarder consuming")
			}
		}
		f.mu.Unlock()
		return
	}
}

// Close stops consuming and closes the Forwarder's producer. A message
// being forwarded is finished or, when Close comes first, left to the
// broker to deliver again.
func (f *Forwarder) Close(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	close(f.stop)
	beat := f.beat
	f.mu.Unlock()
	beat.Stop(ctx)
	f.wg.Wait()
	var err error
	if f.consuming {
		f.rc.close()
		err = shutdownConsumer(f.pc, f.log)
	}
	return errors.Join(err, f.pub.Close(ctx))
}

// consume is the push consumer's callback; batches hold one message.
func (f *Forwarder) consume(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	for _, ext := range msgs {
		if err := f.forward(ctx, ext); err != nil {
			f.log.Warn("cannot forward a delayed message; the broker delivers it again", "txmsg_id", ext.GetProperty(txmsg.PropertyID), "err", err)
			f.counts.Failed()
			return consumer.ConsumeRetryLater, nil
		}
	}
	return consumer.ConsumeSuccess, nil
}

// forward sends one message of the delay topic on: to its topic, now or
// with the broker's timer, or back through the delay topic for one more
// delay level.
func (f *Forwarder) forward(ctx context.Context, ext *primitive.MessageExt) error {
	rec := fromExt(ext)
	m := rec.Message
	if m.Topic == "" || m.Topic == f.cfg.Topic || rec.DueAt.IsZero() {
		f.log.Error("message in the delay topic without a destination topic or due time; dropping it (it was not sent by txmsg)",
			"broker_msg_id", ext.MsgId, "txmsg_id", m.ID)
		return nil
	}
	for _, k := range brokerTimerProperties {
		delete(m.Properties, k)
	}
	if f.Mode() == DelayTimer {
		if ext.GetProperty(propertyTimerOutMs) != "" {
			// Back from the broker's timer. It normally brings a message
			// back less than TimerPrecision+timerLead before its due time;
			// more means the broker's clock runs ahead of this host's, and
			// another timer would bring it back at once: the delay levels
			// do not depend on the broker's clock.
			if time.Until(rec.DueAt) <= 2*(f.cfg.TimerPrecision+timerLead) {
				return f.sendWhenDue(ctx, m, rec.DueAt)
			}
			return f.byLevels(ctx, m, rec.DueAt)
		}
		err := f.byTimer(ctx, m, rec.DueAt)
		if err == nil || !timerRefused(err) {
			return err
		}
		// A 5.x broker without its timer (timerWheelEnable=false), or one
		// whose timerMaxDelaySec is shorter than the time left: the delay
		// levels work on every broker.
		if strings.Contains(err.Error(), "not enabled") {
			f.mode.Store(DelayLevels)
			f.log.Warn("the broker's timer is off; forwarding with the delay levels from now on", "err", err)
		} else {
			f.log.Warn("the broker refused the timer for this message; forwarding it with the delay levels", "txmsg_id", m.ID, "err", err)
		}
	}
	return f.byLevels(ctx, m, rec.DueAt)
}

// byTimer sends m through the delay topic with the broker's timer set to
// fire before its due time, or, when the next timer could not fire before
// it, waits out the time left and sends m to its topic.
func (f *Forwarder) byTimer(ctx context.Context, m *txmsg.Message, due time.Time) error {
	at, hop := timerHop(time.Now(), due, f.cfg.TimerPrecision)
	if !hop {
		return f.sendWhenDue(ctx, m, due)
	}
	pm := toPrimitive(m)
	pm.Topic = f.cfg.Topic
	pm.WithProperty(propertyTimerDeliverMs, strconv.FormatInt(at, 10))
	if err := f.pub.sendOne(ctx, pm); err != nil {
		return err
	}
	f.chained.Add(1)
	return f.sent()
}

// byLevels sends m back through the delay topic with the next delay level,
// or, when less than the smallest level is left, waits and sends it to its
// topic.
func (f *Forwarder) byLevels(ctx context.Context, m *txmsg.Message, due time.Time) error {
	level, _ := nextHop(time.Until(due), f.cfg.DelayLevels)
	if level > 0 {
		pm := toPrimitive(m)
		pm.Topic = f.cfg.Topic
		pm.WithDelayTimeLevel(level)
		if err := f.pub.sendOne(ctx, pm); err != nil {
			return err
		}
		f.chained.Add(1)
		return f.sent()
	}
	return f.sendWhenDue(ctx, m, due)
}

// sendWhenDue waits until due (by this host's clock) and sends m to its
// topic. The wait holds one of the Concurrency consumers.
func (f *Forwarder) sendWhenDue(ctx context.Context, m *txmsg.Message, due time.Time) error {
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-f.stop:
			t.Stop()
			return errors.New("forwarder closing")
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if err := f.pub.sendOne(ctx, toPrimitive(m)); err != nil {
		return err
	}
	f.forwarded.Add(1)
	f.counts.Sent()
	return f.sent()
}

// timerRefused reports whether a send failed because the broker refused
// its timer: "accurate timer message is not enabled" or "timer message
// illegal" (SendMessageProcessor's remarks). Its timer flow control is a
// passing failure, retried as any other.
func timerRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "accurate timer message is not enabled") || strings.Contains(msg, "timer message illegal")
}

func (f *Forwarder) sent() error {
	if f.afterSend != nil {
		return f.afterSend()
	}
	return nil
}

// propertyTimerDeliverMs is the broker's timer property (5.x): the
// delivery time in Unix milliseconds.
const propertyTimerDeliverMs = "TIMER_DELIVER_MS"

// propertyTimerOutMs is set by the broker (5.x) on a message its timer
// held: the slot it fired from.
const propertyTimerOutMs = "TIMER_OUT_MS"

// brokerTimerProperties are what the broker's timer adds to a message it
// held (MessageConst). The forwarder drops them, so that consumers of the
// message's topic see the properties its producer set.
var brokerTimerProperties = []string{propertyTimerOutMs, "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
	"TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL"}

// nextHop decides the next step of a message due in left on a broker with
// the delay levels levels (level 1 first, ascending): level > 0 means
// "send it through the delay topic with that level", the largest level
// not longer than left; level 0 means less than the smallest level is
// left: wait for wait (0 when already due) and send it to its topic. The
// broker's levels wait at least their time, so a message is never sent on
// early; each hop adds the broker's and the forwarder's latency.
func nextHop(left time.Duration, levels []time.Duration) (level int, wait time.Duration) {
	for i := len(levels) - 1; i >= 0; i-- {
		if levels[i] <= left {
			return i + 1, 0
		}
	}
	return 0, max(left, 0)
}

// timerLead is how long before a message's due time the broker's timer
// is set to bring it back to the forwarder: room for the timer's own lag
// (its dequeue service polls every 100 ms) and the trip through the
// delay topic, so that the message is back before it is due and the
// forwarder sends it on at its due time.
const timerLead = 300 * time.Millisecond

// timerHop decides, at now, how a message due at due goes on a broker
// whose timerPrecisionMs is precision. hop true: send it through the delay
// topic with TIMER_DELIVER_MS at; false: less than precision+timerLead is
// left, so wait out the rest and send it to its topic.
//
// The broker (HookUtils.handleScheduleMessage) puts a message in the
// timer slot of TIMER_DELIVER_MS rounded down to a multiple of precision,
// an exact multiple one step further down, and TimerMessageStore delivers
// a slot once the current time has passed the slot's end (the slot is
// before the current time rounded down). Asking for due-precision-timerLead
// therefore brings the message back between due-precision-timerLead and
// due-timerLead, plus the broker's lag: never after the due time while the
// lag stays under timerLead, so the event's lateness is the forwarder's
// own sending time, and the forwarder waits at most precision+timerLead.
func timerHop(now, due time.Time, precision time.Duration) (at int64, hop bool) {
	back := due.Add(-precision - timerLead)
	if !back.After(now) {
		return 0, false
	}
	return back.UnixMilli(), true
}

// codeGetBrokerRuntimeInfo is RocketMQ's GET_BROKER_RUNTIME_INFO request.
const codeGetBrokerRuntimeInfo = 28

// detect picks the delay mode: DelayTimer when every master broker the
// name servers know reports version 5 or later, else DelayLevels.
func (f *Forwarder) detect(ctx context.Context) (DelayMode, string) {
	var masters []string
	for _, ns := range f.cfg.NameServers {
		c, cancel := context.WithTimeout(ctx, f.cfg.NameServerTimeout)
		ci, err := rmqwire.Cluster(c, ns, f.cfg.TLS)
		cancel()
		if err != nil {
			continue
		}
		for _, b := range ci.BrokerAddrTable {
			if a := b.Master(); a != "" {
				masters = append(masters, a)
			}
		}
		break
	}
	if len(masters) == 0 {
		return DelayLevels, "no name server listed the brokers"
	}
	for _, addr := range masters {
		c, cancel := context.WithTimeout(ctx, f.cfg.NameServerTimeout)
		v, err := brokerVersion(c, addr, f.cfg.TLS)
		cancel()
		if err != nil {
			return DelayLevels, fmt.Sprintf("cannot ask broker %s for its version: %v", addr, err)
		}
		if !timerBroker(v) {
			return DelayLevels, fmt.Sprintf("broker %s runs %s", addr, v)
		}
	}
	return DelayTimer, fmt.Sprintf("every broker runs RocketMQ 5 or later (%d masters)", len(masters))
}

// brokerVersion asks the broker at addr for its version, as it names it
// (brokerVersionDesc, such as V5_3_3).
func brokerVersion(ctx context.Context, addr string, useTLS bool) (string, error) {
	a, err := rmqwire.Invoke(ctx, addr, useTLS, codeGetBrokerRuntimeInfo, nil)
	if err != nil {
		return "", err
	}
	if a.Code != 0 {
		return "", fmt.Errorf("the broker answered code %d: %s", a.Code, a.Remark)
	}
	var info struct {
		Table map[string]string `json:"table"`
	}
	if err := json.Unmarshal(a.Body, &info); err != nil {
		return "", fmt.Errorf("runtime info: %w", err)
	}
	v := info.Table["brokerVersionDesc"]
	if v == "" {
		return "", errors.New("runtime info without brokerVersionDesc")
	}
	return v, nil
}

// timerBroker reports whether a brokerVersionDesc (V4_9_7, V5_3_3) names
// RocketMQ 5 or later, whose brokers have the timer.
func timerBroker(desc string) bool {
	major, _, _ := strings.Cut(strings.TrimPrefix(desc, "V"), "_")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 5
}

package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// Consumer defaults.
const (
	// DefaultConcurrency is ConsumerConfig.Concurrency's default.
	DefaultConcurrency = 16
	// DefaultMaxReconsumeTimes is ConsumerConfig.MaxReconsumeTimes's
	// default, RocketMQ's own.
	DefaultMaxReconsumeTimes = 16
	// DefaultBufferMessages is ConsumerConfig.BufferMessages's default:
	// messages pulled ahead and held by one consumer.
	DefaultBufferMessages = 1024
	// DefaultBufferMiB is ConsumerConfig.BufferMiB's default: MiB of
	// bodies pulled ahead and held by one consumer.
	DefaultBufferMiB = 256
)

// ConsumerConfig configures a [Consumer]. Config.Group is the consumer
// group: the inbox dedupes per group, so two groups each handle every event
// once. SendTimeout, Retries and MaxBodySize do not apply to consumers.
//
// Where a new group starts: a group that has no committed offset for a
// queue starts at that queue's end when its first consumer starts (as
// RocketMQ's CONSUME_FROM_LAST_OFFSET), except where the broker still holds
// the queue's first message in memory (a young topic): there it starts at
// the beginning. Events published before that point are not handled by the
// group; to replay them, reset the group's offsets with mqadmin
// (resetOffsetByTime) while no consumer of it runs. Start writes that start
// offset to the broker before it returns, so it holds from then on: when
// a consumer crashes right after Start, before it has consumed anything,
// the group's next consumer starts at that offset, and events published in
// between are handled. Start fails, naming the queue and the broker's answer, when the
// broker refuses the write or cannot be asked.
type ConsumerConfig struct {
	Config
	// Concurrency is the most handlers running at once, across all routes,
	// from 1 to 1000. Default [DefaultConcurrency] (16). Each running handler
	// holds one database connection; keep it below the pool's size.
	Concurrency int
	// MaxReconsumeTimes is how many times a message whose handler keeps
	// failing is delivered again; after that the broker moves it to the
	// dead-letter topic %DLQ%<Group> (which consumers do not read; inspect
	// and resend it with mqadmin). Default [DefaultMaxReconsumeTimes] (16).
	// A failure while the inbox's database does not answer is not a
	// delivery: the consumer holds the message until the database answers.
	MaxReconsumeTimes int
	// RetryDelayLevel is the broker delay level of every redelivery after
	// a handler error. Zero, the default, lets the broker pick level
	// 3 + (deliveries so far - 1): with the broker's default
	// messageDelayLevel ("1s 5s 10s 30s 1m 2m ... 2h") that is 10 s, 30 s,
	// 1 min, 2 min and so on, 4 h 46 min in all over 16 retries. A positive
	// level is used for every retry: 1 is 1 s, 2 is 5 s on a default
	// broker, and a level above the broker's highest means the highest.
	RetryDelayLevel int
	// BufferMessages bounds how many messages the consumer pulls ahead and
	// holds in memory, across all its queues, while handlers are busy (or
	// held by a database outage); past it, the lag waits on the broker.
	// Each queue the consumer holds gets an equal share, at least one
	// message, and may exceed it by one pull batch (32 messages). From 1
	// to 6,553,500. Default [DefaultBufferMessages] (1,024). Without it the
	// client's own bound is 102,400 messages per consumer.
	BufferMessages int
	// BufferMiB bounds the bodies held the same way, in MiB, across all
	// queues, each queue's share at least 1 MiB. From 1 to 102,400.
	// Default [DefaultBufferMiB] (256). Without it the client's own bound
	// is 51,200 MiB per consumer.
	BufferMiB int
	// OnProcessed, when set, is called once per delivery after the
	// consumer has decided about it: outcome is what the inbox did when
	// err is nil; a non-nil err means the broker will deliver the message
	// again. Deliveries turned away because the consumer is closing are
	// not reported. It runs on the consuming goroutine; keep it fast.
	// Meant for metrics and tests.
	OnProcessed func(r *txmsg.Received, outcome txmsg.Outcome, err error)
}

func (c *ConsumerConfig) validate() error {
	if err := c.Config.validate("consumer"); err != nil {
		return err
	}
	switch {
	case c.Concurrency < 0 || c.Concurrency > 1000:
		return fmt.Errorf("%w: consumer: Concurrency must be between 1 and 1000 (0 means %d)", txmsg.ErrInvalidConfig, DefaultConcurrency)
	case c.MaxReconsumeTimes < 0 || c.MaxReconsumeTimes > math.MaxInt32:
		return fmt.Errorf("%w: consumer: MaxReconsumeTimes must be positive (0 means %d)", txmsg.ErrInvalidConfig, DefaultMaxReconsumeTimes)
	case c.RetryDelayLevel < 0:
		return fmt.Errorf("%w: consumer: RetryDelayLevel must not be negative (0 means the broker's schedule)", txmsg.ErrInvalidConfig)
	case c.BufferMessages < 0 || c.BufferMessages > 6_553_500:
		return fmt.Errorf("%w: consumer: BufferMessages must be between 1 and 6553500 (0 means %d)", txmsg.ErrInvalidConfig, DefaultBufferMessages)
	case c.BufferMiB < 0 || c.BufferMiB > 102_400:
		return fmt.Errorf("%w: consumer: BufferMiB must be between 1 and 102400 (0 means %d)", txmsg.ErrInvalidConfig, DefaultBufferMiB)
	}
	if c.BufferMessages == 0 {
		c.BufferMessages = DefaultBufferMessages
	}
	if c.BufferMiB == 0 {
		c.BufferMiB = DefaultBufferMiB
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxReconsumeTimes == 0 {
		c.MaxReconsumeTimes = DefaultMaxReconsumeTimes
	}
	return nil
}

// Consumer is a RocketMQ push consumer (clustering mode, concurrent) that
// runs each message's [txmsg.Route] through an [txmsg.Inbox]: the handler
// runs in a database transaction that first records (group, message ID),
// so its effects are applied at most once per group, and the message is
// acknowledged only after that transaction commits.
//
// For each delivery:
//   - handled, duplicate or parked (undecodable body, stored in the
//     inbox's parked table) → acknowledged;
//   - handler error or panic → rolled back and delivered again later (see
//     ConsumerConfig.RetryDelayLevel), up to MaxReconsumeTimes times, then
//     moved to the broker's %DLQ%<Group> topic;
//   - any failure while the inbox's database does not answer a probe →
//     rolled back, not counted: the message is held in process and run
//     again once the database answers, so an outage longer than the
//     retry budget sends nothing to %DLQ%<Group>.
//
// The dedupe key is the txmsg ID (the TXMSG_ID property) of messages sent
// through txmsg. Messages from other producers are deduped by the broker's
// message ID: the client-generated unique key (UNIQ_KEY), which every
// official RocketMQ client sets and which survives redelivery, else the
// stored message's offset ID. Two sends of the same business event by a
// foreign producer are therefore two messages to the inbox.
//
// Handlers run concurrently and a failed message comes back after later
// ones, so Consumer keeps no per-key order; [OrderedConsumer] does.
//
// After Start it watches the brokers of its topics. When one accepts
// connections again after being unreachable, the consumer refreshes routes,
// heartbeat and queue assignment at once, and re-creates its queues of that
// broker whose pull was in flight when it died (the client would otherwise
// wait out that pull's 30 s timeout); messages those queues were handling
// are delivered again, and the inbox drops the copies of committed ones.
//
// Topics must exist before Start: create them with txmsgctl topic create.
type Consumer struct {
	cfg    ConsumerConfig
	inbox  *txmsg.Inbox
	routes []txmsg.Route
	log    *slog.Logger
	pc     rmq.PushConsumer
	sem    chan struct{}
	rc     *reconnector
	// requeued counts the queues marked, at a broker's return, for
	// re-creation by the next rebalance because their pull was in flight
	// when the broker died.
	requeued atomic.Int64

	// handlerCtx parents every handler's context. It is the consumer's own
	// lifetime, not a caller's context: Close cancels it when its caller
	// stops waiting, so running transactions roll back.
	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	// closing is closed when Close begins; released after the client has
	// shut down (see hold).
	closing  chan struct{}
	released chan struct{}

	mu       sync.RWMutex
	started  bool
	closed   bool
	startErr error
	inflight sync.WaitGroup
}

// NewConsumer validates cfg and routes and builds a consumer of cfg.Group
// that subscribes each route's topic and tag expression. Call Start to
// begin consuming. Every route must be valid and have its own topic.
func NewConsumer(cfg ConsumerConfig, inbox *txmsg.Inbox, routes ...txmsg.Route) (*Consumer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := cfg.noHooks("consumer", "set them on the Inbox (txmsg.InboxConfig.Hooks)"); err != nil {
		return nil, err
	}
	if inbox == nil {
		return nil, fmt.Errorf("%w: consumer: inbox is nil", txmsg.ErrInvalidConfig)
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("%w: consumer: no routes; build them with txmsg.Handle", txmsg.ErrInvalidConfig)
	}
	seen := make(map[string]bool, len(routes))
	for i, r := range routes {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("consumer: route %d: %w", i, err)
		}
		if seen[r.Topic()] {
			return nil, fmt.Errorf("%w: consumer: two routes for topic %q; a group has one handler per topic", txmsg.ErrInvalidConfig, r.Topic())
		}
		seen[r.Topic()] = true
	}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	pc, err := rmq.NewPushConsumer(consumerOptions(&cfg)...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new consumer: %w", err)
	}
	c := &Consumer{
		cfg:      cfg,
		inbox:    inbox,
		routes:   append([]txmsg.Route(nil), routes...),
		log:      cfg.Logger.With("component", "txmsg.consumer", "group", cfg.Group),
		pc:       pc,
		sem:      make(chan struct{}, cfg.Concurrency),
		closing:  make(chan struct{}),
		released: make(chan struct{}),
	}
	c.handlerCtx, c.cancelHandler = context.WithCancel(context.Background())
	for _, r := range c.routes {
		sel := consumer.MessageSelector{Type: consumer.TAG, Expression: r.Tags()}
		if err := pc.Subscribe(r.Topic(), sel, c.callback(r)); err != nil {
			return nil, fmt.Errorf("rocketmq: consumer: subscribe %s: %w", r.Topic(), err)
		}
	}
	return c, nil
}

// consumerOptions maps the config to the client's options. Batches are one
// message: RocketMQ's concurrent consume result covers a whole batch, and
// each message needs its own.
func consumerOptions(cfg *ConsumerConfig) []consumer.Option {
	c := &cfg.Config
	opts := []consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver(c.NameServers)),
		consumer.WithGroupName(c.Group),
		// The client shares one connection set, and one registration per
		// group, among everything with the same instance name.
		consumer.WithInstance(fmt.Sprintf("txmsg-consumer-%d-%s", os.Getpid(), txmsg.NewID())),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeMessageBatchMaxSize(1),
		consumer.WithConsumeGoroutineNums(cfg.Concurrency),
		consumer.WithMaxReconsumeTimes(int32(cfg.MaxReconsumeTimes)),
		// The client divides the per-topic thresholds (its names; they
		// cover all of the consumer's queues) among the queues it holds at
		// each rebalance, overwriting the per-queue ones, which apply
		// until then.
		consumer.WithPullThresholdForTopic(cfg.BufferMessages),
		consumer.WithPullThresholdSizeForTopic(cfg.BufferMiB),
		consumer.WithPullThresholdForQueue(int64(min(cfg.BufferMessages, 65535))),
		consumer.WithPullThresholdSizeForQueue(min(cfg.BufferMiB, 1024)),
	}
	return append(opts, c.consumerAccess()...)
}

// consumerAccess maps the namespace, credentials and TLS settings to the
// consumer client's options.
func (c *Config) consumerAccess() []consumer.Option {
	var opts []consumer.Option
	if c.Namespace != "" {
		opts = append(opts, consumer.WithNamespace(c.Namespace))
	}
	if c.AccessKey != "" {
		opts = append(opts, consumer.WithCredentials(c.credentials()))
	}
	if c.TLS {
		opts = append(opts, consumer.WithTls(true))
	}
	return opts
}

// Start connects, joins the group and begins consuming. It returns once
// the consumer holds its share of the topics' queues with their start
// offsets fixed and, for queues the group had no offset for, written to
// the broker (see [ConsumerConfig]), so a message published after Start
// returns is consumed even by a brand-new group, even if this process
// dies before it has consumed anything.
//
// Start first asks the name servers for the topics' routes, each name
// server within Config.NameServerTimeout. When none answers, Start fails
// with an error that wraps txmsg.ErrUnavailable and names each name
// server and its error (connection refused, no answer), without starting
// the client: Start may be called again. Start is bounded by ctx
// throughout.
//
// When a route's topic has no route on the name servers, Start fails
// with an error that wraps txmsg.ErrTopicNotFound and names the topic and
// the txmsgctl command that creates it, again without starting the
// client: create the topic and call Start again. Start also fails when
// the broker refuses a new group's start offset; a consumer whose Start
// failed so cannot be started again; build a new one.
func (c *Consumer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return txmsg.ErrClosed
	case c.startErr != nil:
		return c.startErr
	case c.started:
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rocketmq: start consumer: %w", err)
	}
	if err := askTopicRoutes(ctx, &c.cfg.Config, c.brokerTopics()); err != nil {
		// The client has not started: Start may be called again.
		return fmt.Errorf("rocketmq: start consumer of group %q: %w", c.cfg.Group, err)
	}
	if err := startWithin(ctx, c.pc, c.log, c.start); err != nil {
		c.startErr = fmt.Errorf("rocketmq: start consumer of group %q: %w", c.cfg.Group, err)
		return c.startErr
	}
	c.started = true
	c.rc = watchConsumerBrokers(c.pc, c.log, c.brokerTopics())
	if c.rc != nil {
		c.rc.stuck = expireStuckPulls(c.pc, c.log, &c.requeued)
	}
	c.rc.start()
	return nil
}

// expireStuckPulls returns what a push consumer's reconnector calls when
// brokers came back: the queues whose pull was sent to one of them before
// it was seen gone are marked as expired (clientinternals.ExpirePulls), so
// that the rebalance which follows re-creates them with a pull at once,
// instead of after the 30 s the client waits for an answer a dead
// connection never brings (and 3 s more).
func expireStuckPulls(pc any, log *slog.Logger, count *atomic.Int64) func(map[string]time.Time) {
	return requeueOnReturn(log, count, func(stuck map[string]time.Time) (int, error) {
		if stuck == nil {
			stuck = map[string]time.Time{"": {}} // reaches the client's fields without touching a queue
		}
		return clientinternals.ExpirePulls(pc, stuck)
	})
}

// requeueOnReturn wraps requeue, which re-creates a consumer's queues of
// the returned brokers whose pull predates their going (and, called with
// nil, only checks that it can), into what the reconnector calls at a
// broker's return; it counts the queues in count and logs them. It returns
// nil, after a warning, when requeue cannot reach the client's internals:
// such queues then pull again about 33 s after the broker died.
func requeueOnReturn(log *slog.Logger, count *atomic.Int64, requeue func(map[string]time.Time) (int, error)) func(map[string]time.Time) {
	if _, err := requeue(nil); err != nil {
		log.Warn("cannot re-create queues whose pulls were lost with a broker; after a broker restart they pull again about 33 s after it died", "err", err)
		return nil
	}
	return func(stuck map[string]time.Time) {
		n, err := requeue(stuck)
		if err != nil {
			log.Warn("re-creating queues whose pulls were lost with a broker", "err", err)
		}
		if n > 0 {
			count.Add(int64(n))
			log.Info("broker back; re-creating the queues whose pull was lost with it", "brokers", brokerNames(stuck), "queues", n)
		}
	}
}

// brokerNames returns the keys of stuck, sorted.
func brokerNames(stuck map[string]time.Time) []string {
	names := make([]string, 0, len(stuck))
	for name := range stuck {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// startWithin runs a consumer's start, whose client calls take no
// context, and returns its error, or ctx's when ctx ends first; the client
// is then shut down once start has returned. A start that fails shuts the
// client down itself (the client does when a topic is missing).
func startWithin(ctx context.Context, pc interface{ Shutdown() error }, log *slog.Logger, start func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				_ = shutdownConsumer(pc, log)
			}
		}()
		return ctx.Err()
	}
}

// watchConsumerBrokers watches the brokers of a consumer's topics (as the
// broker knows them): a restarted broker serves a group's pulls only after
// its heartbeat. It returns nil, after a warning, when the client's
// internals are out of reach.
func watchConsumerBrokers(pc any, log *slog.Logger, topics []string) *reconnector {
	rp, err := clientinternals.NameServers(pc)
	if err != nil {
		log.Warn("cannot watch brokers; after a broker restart the client recovers on its 30 s timers", "err", err)
		return nil
	}
	refresh, err := clientinternals.ConsumerRefresher(pc)
	if err != nil {
		log.Warn("cannot watch brokers; after a broker restart the client recovers on its 30 s timers", "err", err)
		return nil
	}
	return newReconnector(log, topics, rp, refresh)
}

func (c *Consumer) start(ctx context.Context) error {
	if err := c.pc.Start(); err != nil {
		return explainRouteError(ctx, &c.cfg.Config, c.brokerTopics(), err)
	}
	c.settle()
	return startPinned(ctx, c.pc, c.brokerGroup(), c.brokerTopics(), c.log)
}

// brokerTopics are the consumer's topics as the broker knows them.
func (c *Consumer) brokerTopics() []string {
	topics := make([]string, 0, len(c.routes))
	for _, r := range c.routes {
		topics = append(topics, c.cfg.brokerTopic(r.Topic()))
	}
	return topics
}

// startPinned records the start offsets of a consumer's new group (see
// pinStartOffsets) and shuts the client down when that fails. Without the
// client's internals it logs a warning and lets the client go on alone.
func startPinned(ctx context.Context, pc interface{ Shutdown() error }, group string, topics []string, log *slog.Logger) error {
	n, err := pinStartOffsets(ctx, pc, group, topics, log)
	switch {
	case errors.Is(err, errCannotPin):
		log.Warn("cannot record the group's start offsets; if this brand-new group's consumers stop before the client has persisted an offset (10 to 25 s after start), events published until they start again may be skipped", "err", err)
		return nil
	case err != nil:
		_ = shutdownConsumer(pc, log)
		return fmt.Errorf("record the group's start offsets: %w", err)
	}
	if n > 0 {
		log.Info("recorded the start offsets of queues the group had none for", "queues", n)
	}
	return nil
}

// settleWait bounds how long Start waits for the group's retry topic.
const settleWait = 5 * time.Second

// settle waits until the client knows the route of the group's retry topic,
// then runs one rebalance to completion.
//
// Why: the client's Start fetches routes, sends its first heartbeat and
// only then starts a rebalance in the background. So when Start returns,
// queues may not be assigned yet, and a new group that looks up its start
// offset while a message is being published can start just past it: the
// message is never consumed. And the broker creates %RETRY%<Group> only
// on that first heartbeat, after the routes were fetched; left alone, the
// client learns its route up to 30 s later and rebalances up to 20 s after
// that, and a new group's first redeliveries wait as long.
//
// The client has no public call for either, so settle reaches the client
// behind the push consumer through package clientinternals. If the pinned
// version's fields are not there, it does nothing and the client catches
// up on its own schedule.
func (c *Consumer) settle() {
	cl := clientinternals.ConsumerClientOf(c.pc)
	rs, ok := c.pc.(interface{ IsSubscribeTopicNeedUpdate(topic string) bool })
	if cl == nil || !ok {
		c.log.Debug("cannot reach the client's rebalance; queues are assigned in the background")
		return
	}
	retry := "%RETRY%" + c.brokerGroup()
	for deadline := time.Now().Add(settleWait); rs.IsSubscribeTopicNeedUpdate(retry); {
		if time.Now().After(deadline) {
			c.log.Warn("the group's retry topic has no route yet; redeliveries may wait for the client's next route refresh (up to 50 s)", "retry_topic", retry)
			break
		}
		time.Sleep(100 * time.Millisecond)
		cl.UpdateTopicRouteInfo()
	}
	// Serialized with the client's own rebalances; when it returns, every
	// subscribed queue this instance owns has a process queue and a start
	// offset.
	cl.RebalanceImmediately()
}

// brokerGroup is the group's name on the broker, with the namespace.
func (c *Consumer) brokerGroup() string {
	if c.cfg.Namespace != "" {
		return c.cfg.Namespace + "%" + c.cfg.Group
	}
	return c.cfg.Group
}

// callback is the client's consume function for route r.
func (c *Consumer) callback(r txmsg.Route) func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	return func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok && c.cfg.RetryDelayLevel > 0 {
			cc.DelayLevelWhenNextConsume = c.cfg.RetryDelayLevel
		}
		for _, ext := range msgs {
			if !c.process(ctx, r, ext) {
				c.hold()
				// The error is logged already; returning it would make the
				// client log it again, with the whole message.
				return consumer.ConsumeRetryLater, nil
			}
		}
		return consumer.ConsumeSuccess, nil
	}
}

// hold keeps a delivery that was not handled from being answered while the
// consumer closes, until the client has shut down. The client then drops
// the answer, and the message stays unacknowledged at its offset: the
// group's next consumer gets it at once, instead of after a retry delay,
// and without counting a failed attempt.
func (c *Consumer) hold() {
	select {
	case <-c.closing:
		<-c.released
	default:
	}
}

// enter admits one delivery unless the consumer is closing.
func (c *Consumer) enter() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	c.inflight.Add(1)
	return true
}

// process runs one delivery through its route and reports whether it may
// be acknowledged.
func (c *Consumer) process(ctx context.Context, r txmsg.Route, ext *primitive.MessageExt) bool {
	if !c.enter() {
		return false
	}
	defer c.inflight.Done()
	select {
	case c.sem <- struct{}{}:
	case <-c.closing:
		return false
	}
	defer func() { <-c.sem }()
	select {
	case <-c.closing:
		return false // both were ready and select chose the semaphore
	default:
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.handlerCtx, cancel)()

	rec := fromExt(ext)
	outcome, err := c.run(ctx, r, rec)
	if err != nil && ctx.Err() == nil {
		outcome, err = c.holdThroughOutage(ctx, r, rec, err)
	}
	if err != nil {
		attrs := withErr([]any{"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "broker_msg_id", rec.BrokerMessageID, "attempt", rec.Attempt}, err)
		switch {
		case c.handlerCtx.Err() != nil:
			c.log.Info("handler interrupted by Close; rolled back, the message goes to the group's next consumer", attrs...)
		case rec.Attempt > c.cfg.MaxReconsumeTimes:
			c.log.Error("handler failed on its last attempt; the broker moves the message to the dead-letter topic",
				append(attrs, "dlq_topic", "%DLQ%"+c.brokerGroup())...)
		default:
			c.log.Warn("handler failed; the broker will deliver the message again", attrs...)
		}
	} else if outcome == txmsg.OutcomeParked {
		c.log.Warn("message body cannot be decoded; parked in the inbox's parked table",
			"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "broker_msg_id", rec.BrokerMessageID, "state", outcome.String())
	} else if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("message consumed", "txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "attempt", rec.Attempt, "state", outcome.String())
	}
	c.observe(rec, outcome, err)
	return err == nil
}

// holdThroughOutage runs rec again for as long as its attempts fail while
// the inbox's database does not answer, waiting between probes (see
// databaseDown): such failures are the database's, so the message is held
// here instead of going back to the broker, where each redelivery counts
// an attempt towards MaxReconsumeTimes and the dead-letter topic. It
// returns the first result that is a success or a failure with the
// database answering, or the last failure when the consumer closes.
//
// A held message keeps its slot of Concurrency, so a long outage stops
// the consumer taking new messages once every slot holds one. The client
// sends a message back to the broker (one attempt) when it has been held
// for its consume timeout (15 min).
func (c *Consumer) holdThroughOutage(ctx context.Context, r txmsg.Route, rec *txmsg.Received, err error) (txmsg.Outcome, error) {
	var outcome txmsg.Outcome
	held := time.Now()
	for n := 1; err != nil; n++ {
		perr := databaseDown(ctx, c.inbox)
		if perr == nil {
			if n > 1 {
				c.log.Info("database answers again; the held message failed once more and goes back to the broker",
					"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "held_for", time.Since(held).Round(time.Millisecond))
			}
			return outcome, err
		}
		if n == 1 {
			c.log.Warn("database unreachable; the message is held without counting an attempt until it answers",
				withErr([]any{"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "attempt", rec.Attempt, "probe_err", perr}, err)...)
		}
		select {
		case <-c.closing:
			return outcome, err
		case <-ctx.Done():
			return outcome, err
		case <-time.After(outageWait(n)):
		}
		outcome, err = c.run(ctx, r, rec)
		if err == nil {
			c.log.Info("database answers again; the held message was processed",
				"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "state", outcome.String(), "held_for", time.Since(held).Round(time.Millisecond))
		}
	}
	return outcome, err
}

// run calls driver.Process and turns a panic outside the handler (in a codec,
// say) into an error: a panic must not escape into the client, which would
// leave the message unanswered until the next rebalance.
func (c *Consumer) run(ctx context.Context, r txmsg.Route, rec *txmsg.Received) (outcome txmsg.Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			outcome, err = 0, &txmsg.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return driver.Process(r, ctx, c.inbox, c.cfg.Group, rec)
}

func (c *Consumer) observe(rec *txmsg.Received, outcome txmsg.Outcome, err error) {
	if c.cfg.OnProcessed == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("OnProcessed panicked", "panic", v, "txmsg_id", rec.Message.ID, "stack", string(debug.Stack()))
		}
	}()
	c.cfg.OnProcessed(rec, outcome, err)
}

// Close stops taking new messages, waits for running handlers to commit or
// roll back, then leaves the group and shuts the client down, saving the
// consumed offsets. Messages received but not handled are left
// unacknowledged and go to the group's other (or next) consumers.
//
// If ctx ends first, the running handlers' contexts are cancelled, so
// their transactions roll back, and Close shuts down without waiting for
// them and returns ctx's error. Either way no handler's work is
// half-applied: a transaction that committed is acknowledged or, if its
// acknowledgement is lost, recognised as a duplicate on redelivery.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := c.started
	close(c.closing)
	c.mu.Unlock()
	defer close(c.released)
	defer c.cancelHandler()
	if !started {
		return nil
	}

	c.rc.close()
	c.pc.Suspend() // stop pulling; what is cached is not handled
	done := make(chan struct{})
	go func() { c.inflight.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		c.cancelHandler()
		err = fmt.Errorf("rocketmq: consumer close: handlers still running: %w", ctx.Err())
	}
	if serr := shutdownConsumer(c.pc, c.log); serr != nil {
		err = errors.Join(err, fmt.Errorf("rocketmq: consumer shutdown: %w", serr))
	}
	return err
}

// shutdownConsumer shuts down a started push or pull consumer of the
// client. First it stops the consumer's pulls and makes it give up its
// queues, saving their consumed offsets (clientinternals.ReleaseQueues):
// the client's Shutdown closes each held queue's message channel, and a
// pull that was in flight, a broker long poll of up to 20 s, may still
// send on it when it returns, a data race and at worst a "send on closed
// channel" panic that ends the process. A released queue is not closed,
// and a pull that comes back on it stores nothing. If the pinned client's
// internals are not there, it shuts down as the client alone would.
func shutdownConsumer(pc interface{ Shutdown() error }, log *slog.Logger) error {
	if _, err := clientinternals.ReleaseQueues(pc); err != nil {
		log.Warn("could not release the consumer's queues before shutdown", "err", err)
	}
	return pc.Shutdown()
}

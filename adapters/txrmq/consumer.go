package txrmq

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/txmsg"
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

// ConsumerConfig configures a [Consumer]. Group is the consumer group: the
// inbox dedupes per group, so two groups each handle every event once. The
// consumer's events go to its inbox's hooks (txmsg.InboxConfig.Hooks:
// HookBeforeHandle, HookConsumed).
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
	Conn
	// Group is the consumer group. Required.
	Group string
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
	// Heartbeat is the consumer's row in the instance table, written from
	// Start to Close on the inbox's database: its Health and its counts
	// (see package fleet). Optional: the zero value writes every 10 s into
	// txmsg_instances.
	Heartbeat fleet.Config
}

// WithDefaults returns c with its zero fields set to their defaults. It
// checks nothing.
func (c ConsumerConfig) WithDefaults() ConsumerConfig {
	c.Conn = c.Conn.WithDefaults()
	c.Concurrency, c.MaxReconsumeTimes = consumeDefaults(c.Concurrency, c.MaxReconsumeTimes)
	if c.BufferMessages == 0 {
		c.BufferMessages = DefaultBufferMessages
	}
	if c.BufferMiB == 0 {
		c.BufferMiB = DefaultBufferMiB
	}
	c.Heartbeat = c.Heartbeat.WithDefaults()
	return c
}

// Validate checks c, which WithDefaults has filled in. The error wraps
// [txmsg.ErrInvalidConfig] and names the field.
func (c ConsumerConfig) Validate() error { return c.validate("consumer") }

func (c *ConsumerConfig) validate(what string) error {
	if err := validateClient(what, &c.Conn, c.Group); err != nil {
		return err
	}
	if err := validateConsume(what, c.Concurrency, c.MaxReconsumeTimes); err != nil {
		return err
	}
	switch {
	case c.RetryDelayLevel < 0:
		return fmt.Errorf("%w: %s: RetryDelayLevel must not be negative (0 means the broker's schedule)", txmsg.ErrInvalidConfig, what)
	case c.BufferMessages < 1 || c.BufferMessages > 6_553_500:
		return fmt.Errorf("%w: %s: BufferMessages must be between 1 and 6553500 (0 means %d)", txmsg.ErrInvalidConfig, what, DefaultBufferMessages)
	case c.BufferMiB < 1 || c.BufferMiB > 102_400:
		return fmt.Errorf("%w: %s: BufferMiB must be between 1 and 102400 (0 means %d)", txmsg.ErrInvalidConfig, what, DefaultBufferMiB)
	}
	return c.Heartbeat.ValidateIn(what)
}

// Consumer is a RocketMQ push consumer (clustering mode, concurrent) that
// runs each message's [txmsg.Route] through an [txmsg.Inbox]: the handler
// runs in a database transaction that first records (group, message ID),
// so its effects are applied at most once per group, and the message is
// acknowledged only after that transaction commits.
//
// For each delivery:
//   - handled, duplicate or parked (undecodable body, stored in the
//     parked table) → acknowledged;
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
	consumerCore
	cfg    ConsumerConfig
	routes []txmsg.Route
	pc     rmq.PushConsumer
	// released is closed after the client has shut down (see hold).
	released chan struct{}
	inflight sync.WaitGroup
}

// NewConsumer builds a consumer of cfg.Group that runs inbox for routes,
// subscribing each route's topic and tag expression, after filling cfg's
// defaults and validating it (see [ConsumerConfig.WithDefaults] and
// [ConsumerConfig.Validate]). Call Start to begin consuming. Every route
// must be valid and have its own topic.
func NewConsumer(inbox *txmsg.Inbox, routes []txmsg.Route, cfg ConsumerConfig) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, routes: append([]txmsg.Route(nil), routes...), released: make(chan struct{})}
	if err := c.init("consumer", cfg.Conn, cfg.Group, cfg.Concurrency, inbox, routes, cfg.Heartbeat); err != nil {
		return nil, err
	}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	pc, err := rmq.NewPushConsumer(consumerOptions(&cfg)...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new consumer: %w", err)
	}
	c.pc, c.client = pc, pc
	c.settleWait, c.warnUnsettled = settleWait, true
	c.requeue = expireStuckPulls
	for _, r := range c.routes {
		sel := consumer.MessageSelector{Type: consumer.TAG, Expression: r.Tags()}
		if err := pc.Subscribe(r.Topic(), sel, c.callback(r)); err != nil {
			return nil, fmt.Errorf("rocketmq: consumer: subscribe %s: %w", r.Topic(), err)
		}
	}
	return c, nil
}

// settleWait bounds how long a Consumer's Start waits for the group's
// retry topic (see consumerCore.settle).
const settleWait = 5 * time.Second

// consumerOptions maps the config to the client's options. Batches are one
// message: RocketMQ's concurrent consume result covers a whole batch, and
// each message needs its own.
func consumerOptions(cfg *ConsumerConfig) []consumer.Option {
	opts := []consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver(cfg.NameServers)),
		consumer.WithGroupName(cfg.Group),
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
	return append(opts, cfg.consumerAccess()...)
}

// Start connects, joins the group and begins consuming. It returns once
// the consumer holds its share of the topics' queues with their start
// offsets fixed and, for queues the group had no offset for, written to
// the broker (see [ConsumerConfig]), so a message published after Start
// returns is consumed even by a brand-new group, even if this process
// dies before it has consumed anything.
//
// Start first asks the name servers for the topics' routes, each name
// server within Conn.NameServerTimeout. When none answers, Start fails
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
func (c *Consumer) Start(ctx context.Context) error { return c.startConsumer(ctx) }

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
	rec.Final = rec.Attempt > c.cfg.MaxReconsumeTimes // a failure now sends it to %DLQ%<group>
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
	return c.closeConsumer(ctx, c.pc.Suspend, c.inflight.Wait, func() { close(c.released) })
}

// Health reports whether the consumer can do its work now: it is started
// and not closed, the inbox's database answers ([txmsg.Inbox.Ping]), and
// the name servers route every subscribed topic to a broker that accepts
// connections. It returns nil when healthy; the error names the failing
// part. Bounded by ctx; meant for readiness probes.
func (c *Consumer) Health(ctx context.Context) error { return c.health(ctx) }

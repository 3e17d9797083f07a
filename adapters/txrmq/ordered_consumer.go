package txrmq

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// Ordered consumer defaults.
const (
	// DefaultOrderedMinBackoff is OrderedConsumerConfig.MinBackoff's
	// default.
	DefaultOrderedMinBackoff = time.Second
	// DefaultOrderedMaxBackoff is OrderedConsumerConfig.MaxBackoff's
	// default.
	DefaultOrderedMaxBackoff = 30 * time.Second
	// orderedPullBatch is how many messages one pull of a queue fetches.
	orderedPullBatch = 32
	// orderedQueueBuffer is how many pulled batches one queue may hold
	// while it waits (a handler backing off); past that, pulling waits for
	// it. 64 batches of orderedPullBatch is 2048 messages.
	orderedQueueBuffer = 64
	// orderedPersistEvery is how often acknowledged offsets are written to
	// the broker (the client itself does it every 5 s).
	orderedPersistEvery = time.Second
	// orderedPollWait bounds one wait for pulled messages.
	orderedPollWait = 200 * time.Millisecond
	// orderedDropCheck is how often a backing-off queue looks whether it
	// was taken away or the consumer is closing.
	orderedDropCheck = 100 * time.Millisecond
)

// OrderedConsumerConfig configures an [OrderedConsumer]. Group is the
// consumer group, as for [ConsumerConfig]; a group must be consumed either
// by ordered consumers or by concurrent ones, not both. A new group starts
// where [ConsumerConfig] says, and Start records that start on the broker
// the same way. The consumer's events go to its inbox's hooks
// (txmsg.InboxConfig.Hooks); a message given up after MaxReconsumeTimes
// is reported to HookConsumed as OutcomeParked.
type OrderedConsumerConfig struct {
	Conn
	// Group is the consumer group. Required.
	Group string
	// Concurrency is the most handlers running at once across all queues,
	// from 1 to 1000. A queue never runs more than one. Default
	// DefaultConcurrency (16).
	Concurrency int
	// MaxReconsumeTimes is how many times a message whose handler keeps
	// failing is retried in place; after that it is parked in the inbox's
	// parked table (see [driver.ParkFailed]) and its queue goes
	// on. Default DefaultMaxReconsumeTimes (16). Retries are counted by the
	// process that makes them: a message that moves to another consumer
	// (rebalance, crash) starts counting again. A failure while the inbox's
	// database does not answer is not counted.
	MaxReconsumeTimes int
	// MinBackoff and MaxBackoff bound how long a queue waits before it
	// retries a failed message: MinBackoff after the first failure,
	// doubling up to MaxBackoff. Defaults DefaultOrderedMinBackoff (1 s)
	// and DefaultOrderedMaxBackoff (30 s), or MinBackoff when that is
	// longer; with 16 retries a message is parked about 6 minutes after
	// its first failure.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Heartbeat is the consumer's row in the instance table, as
	// [ConsumerConfig.Heartbeat].
	Heartbeat fleet.Config
}

// WithDefaults returns c with its zero fields set to their defaults. It
// checks nothing.
func (c OrderedConsumerConfig) WithDefaults() OrderedConsumerConfig {
	c.Conn = c.Conn.WithDefaults()
	c.Concurrency, c.MaxReconsumeTimes = consumeDefaults(c.Concurrency, c.MaxReconsumeTimes)
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultOrderedMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultOrderedMaxBackoff, c.MinBackoff)
	}
	c.Heartbeat = c.Heartbeat.WithDefaults()
	return c
}

// Validate checks c, which WithDefaults has filled in. The error wraps
// [txmsg.ErrInvalidConfig] and names the field.
func (c OrderedConsumerConfig) Validate() error {
	const what = "ordered consumer"
	if err := validateClient(what, &c.Conn, c.Group); err != nil {
		return err
	}
	if err := validateConsume(what, c.Concurrency, c.MaxReconsumeTimes); err != nil {
		return err
	}
	switch {
	case c.MinBackoff <= 0:
		return fmt.Errorf("%w: %s: MinBackoff must be positive (0 means %s)", txmsg.ErrInvalidConfig, what, DefaultOrderedMinBackoff)
	case c.MaxBackoff <= 0:
		return fmt.Errorf("%w: %s: MaxBackoff must be positive (0 means %s)", txmsg.ErrInvalidConfig, what, DefaultOrderedMaxBackoff)
	case c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("%w: %s: MaxBackoff %v is below MinBackoff %v", txmsg.ErrInvalidConfig, what, c.MaxBackoff, c.MinBackoff)
	}
	return c.Heartbeat.ValidateIn(what)
}

// OrderedConsumer consumes each queue of its topics one message at a time,
// in queue order, through an [txmsg.Inbox], like [Consumer] does: the
// handler runs in the transaction that records (group, message ID), and a
// message is acknowledged only after that transaction commits. Messages
// sent with the same sharding key share a queue, so each key's handler
// sees its events in the order the broker stored them.
//
// For each message:
//   - handled, duplicate or parked (undecodable body) → the queue goes on;
//   - handler error or panic → rolled back; the queue waits MinBackoff
//     (doubling up to MaxBackoff) and runs the same message again. Nothing
//     is sent to the group's %RETRY% topic, so no later message of the
//     queue overtakes it;
//   - still failing after MaxReconsumeTimes retries → parked in the
//     parked table (driver.ParkFailed), logged at error level,
//     and the queue goes on;
//   - any failure while the inbox's database does not answer a probe →
//     rolled back, not counted: the queue waits (0.5 s, doubling to 5 s)
//     and runs the same message again, so an outage never parks a
//     message.
//
// Other queues keep flowing while one waits, until that queue holds 2048
// pulled messages; then pulling waits for it.
//
// It is built on the client's pull consumer: the client assigns the
// group's queues among its live consumers (rebalancing when one joins or
// leaves), pulls them and keeps the consumed offsets on the broker. The
// offset of a queue moves only past messages whose transaction committed
// (or that were duplicates or parked), so a queue's next owner starts at
// or before the first message not handled yet; copies of messages handled
// before are dropped by the inbox. While a queue moves, its old and new
// owner may both work on it for a moment. Both walk it in order, and the
// inbox row of each message is taken by one transaction at a time, so
// neither can commit a message before every earlier message of the queue
// has committed, and per-key order still holds.
//
// A new group starts at the end of each queue, like [Consumer], and Start
// writes that start to the broker before it returns (see
// [ConsumerConfig]). Topics must exist before Start.
//
// Like [Consumer], it watches its brokers and, when one comes back, gives
// up and takes again at once its queues of that broker whose pull was in
// flight when it died, as if they had moved away and back.
type OrderedConsumer struct {
	consumerCore
	cfg    OrderedConsumerConfig
	routes map[string]txmsg.Route
	pc     rmq.PullConsumer

	loops  sync.WaitGroup // dispatcher and persister
	queues sync.WaitGroup // queue workers
	acked  chan struct{}  // signals the persister; capacity 1
}

// NewOrderedConsumer builds an ordered consumer of cfg.Group that runs
// inbox for routes, subscribing each route's topic and tag expression,
// after filling cfg's defaults and validating it (see
// [OrderedConsumerConfig.WithDefaults] and
// [OrderedConsumerConfig.Validate]). Call Start to begin consuming. Every
// route must be valid and have its own topic.
func NewOrderedConsumer(inbox *txmsg.Inbox, routes []txmsg.Route, cfg OrderedConsumerConfig) (*OrderedConsumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &OrderedConsumer{cfg: cfg, routes: make(map[string]txmsg.Route, len(routes)), acked: make(chan struct{}, 1)}
	if err := c.init("ordered consumer", cfg.Conn, cfg.Group, cfg.Concurrency, inbox, routes, cfg.Heartbeat); err != nil {
		return nil, err
	}
	for _, r := range routes {
		c.routes[r.Topic()] = r
	}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	pc, err := rmq.NewPullConsumer(orderedOptions(&cfg)...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new ordered consumer: %w", err)
	}
	for _, r := range routes {
		sel := consumer.MessageSelector{Type: consumer.TAG, Expression: r.Tags()}
		if err := pc.Subscribe(r.Topic(), sel); err != nil {
			return nil, fmt.Errorf("rocketmq: ordered consumer: subscribe %s: %w", r.Topic(), err)
		}
	}
	c.pc, c.client = pc, pc
	// The group's retry topic is waited for only briefly: an ordered
	// consumer sends nothing there.
	c.settleWait = 2 * time.Second
	c.checkEachTopic = true // the client checks only the last subscribed topic
	c.onStarted = func() {
		c.loops.Add(2)
		go c.dispatch()
		go c.persist()
	}
	c.requeue = requeueStuckPulls
	return c, nil
}

func orderedOptions(c *OrderedConsumerConfig) []consumer.Option {
	opts := []consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver(c.NameServers)),
		consumer.WithGroupName(c.Group),
		consumer.WithInstance(fmt.Sprintf("txmsg-ordered-%d-%s", os.Getpid(), txmsg.NewID())),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromLastOffset),
		consumer.WithPullBatchSize(orderedPullBatch),
	}
	return append(opts, c.consumerAccess()...)
}

// Start connects, joins the group and begins consuming. It returns once
// this consumer holds its share of the queues with their start offsets
// fixed and, for queues the group had no offset for, written to the broker,
// so a message published after Start returns is consumed even by a
// brand-new group, even if this process dies before it has consumed
// anything. When no name server answers, or a route's topic has no route
// on them, Start fails as [Consumer.Start] does and may be called again.
// Start also fails when the broker refuses a new group's start offset; a
// consumer whose Start failed so cannot be started again.
func (c *OrderedConsumer) Start(ctx context.Context) error { return c.startConsumer(ctx) }

// requeueStuckPulls is [expireStuckPulls] for the pull consumer under an
// OrderedConsumer, whose rebalance does not re-create expired queues: the
// queues are given up (clientinternals.RequeueStuck) as when a rebalance
// moves them away, so their workers stop before the next message, and the
// rebalance which follows adds them again from the saved offsets. A message
// a stopped worker was handling runs again on the new assignment, where
// the inbox drops it if it committed.
func requeueStuckPulls(pc any, log *slog.Logger, count *atomic.Int64) func(map[string]time.Time) {
	return requeueOnReturn(log, count, func(stuck map[string]time.Time) (int, error) {
		return clientinternals.RequeueStuck(pc, stuck)
	})
}

// processQueue is the part of the client's per-queue state the consumer
// reads: whether the client has taken the queue away (rebalance, close).
type processQueue interface{ IsDroppd() bool }

// queueWorker handles one assignment of one queue, in order.
type queueWorker struct {
	pq processQueue
	ch chan *consumer.ConsumeRequest
}

// dispatch hands each pulled batch to the worker of its queue assignment,
// starting workers as queues arrive and ending those of queues taken away.
func (c *OrderedConsumer) dispatch() {
	defer c.loops.Done()
	workers := map[processQueue]*queueWorker{}
	defer func() {
		for _, w := range workers {
			close(w.ch)
		}
	}()
	for {
		select {
		case <-c.closing:
			return
		default:
		}
		cr, err := c.pc.Poll(c.handlerCtx, orderedPollWait)
		for pq, w := range workers {
			if pq.IsDroppd() {
				close(w.ch)
				delete(workers, pq)
			}
		}
		if err != nil || cr == nil || cr.GetPQ() == nil {
			continue
		}
		pq := processQueue(cr.GetPQ())
		w := workers[pq]
		if w == nil {
			w = &queueWorker{pq: pq, ch: make(chan *consumer.ConsumeRequest, orderedQueueBuffer)}
			workers[pq] = w
			c.queues.Add(1)
			go c.work(w)
		}
		select {
		case w.ch <- cr:
		case <-c.closing:
			return
		}
	}
}

// work handles the batches of one queue assignment in order. It stops
// handling, without acknowledging, as soon as the queue is taken away or
// the consumer closes; it drains its channel until the dispatcher closes
// it.
func (c *OrderedConsumer) work(w *queueWorker) {
	defer c.queues.Done()
	for cr := range w.ch {
		if w.pq.IsDroppd() || c.isClosing() {
			continue
		}
		done := true
		for _, ext := range cr.GetMsgList() {
			if !c.handle(w.pq, ext) {
				done = false
				break
			}
		}
		if !done {
			continue
		}
		c.pc.ACK(context.Background(), cr, consumer.ConsumeSuccess)
		select {
		case c.acked <- struct{}{}:
		default:
		}
	}
}

// handle runs one message until it is handled, a duplicate or parked, and
// reports true; it reports false when it stopped because the queue was
// taken away or the consumer is closing.
func (c *OrderedConsumer) handle(pq processQueue, ext *primitive.MessageExt) bool {
	rec := fromExt(ext)
	rec.Attempt = 1
	route, ok := c.routes[rec.Message.Topic]
	if !ok {
		// Only a message of another topic in the group's retry topic gets
		// here (left by a concurrent consumer of the same group).
		err := fmt.Errorf("ordered consumer: no route for topic %q", rec.Message.Topic)
		return c.park(pq, rec, err)
	}
	outage := 0 // probes that found the database down since the last attempt that counted
	for {
		if pq.IsDroppd() || c.isClosing() {
			return false
		}
		outcome, err := c.attempt(route, rec)
		if err != nil && c.isClosing() {
			if c.handlerCtx.Err() != nil {
				c.log.Info("handler interrupted by Close; rolled back, the message goes to the group's next consumer",
					withErr([]any{"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic}, err)...)
			}
			return false
		}
		if err == nil {
			if outcome == txmsg.OutcomeParked {
				c.log.Warn("message body cannot be decoded; parked in the inbox's parked table",
					"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "broker_msg_id", rec.BrokerMessageID, "state", outcome.String())
			}
			return true
		}
		attrs := withErr([]any{"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "broker_msg_id", rec.BrokerMessageID,
			"queue_id", ext.Queue.QueueId, "queue_offset", ext.QueueOffset, "attempt", rec.Attempt}, err)
		// A failure while the database does not answer is the database's:
		// it counts no attempt, so an outage never parks a message.
		if perr := databaseDown(c.handlerCtx, c.inbox); perr != nil {
			outage++
			if outage == 1 {
				c.log.Warn("database unreachable; the queue waits and retries the same message without counting an attempt",
					append(attrs, "probe_err", perr)...)
			}
			if !c.sleep(pq, outageWait(outage)) {
				return false
			}
			continue
		}
		outage = 0
		if rec.Attempt > c.cfg.MaxReconsumeTimes {
			return c.park(pq, rec, err)
		}
		wait := c.backoff(rec.Attempt)
		c.log.Warn("handler failed; the queue waits and retries the same message", append(attrs, "retry_in", wait)...)
		if !c.sleep(pq, wait) {
			return false
		}
		rec.Attempt++
	}
}

// attempt runs one attempt under the concurrency limit.
func (c *OrderedConsumer) attempt(r txmsg.Route, rec *txmsg.Received) (txmsg.Outcome, error) {
	select {
	case c.sem <- struct{}{}:
	case <-c.closing:
		return 0, txmsg.ErrClosed
	}
	defer func() { <-c.sem }()
	ctx, cancel := context.WithCancel(c.handlerCtx)
	defer cancel()
	return c.run(ctx, r, rec)
}

// park gives up on rec after cause and parks it, retrying the park itself
// (a database error) until it works or the queue is stopped.
func (c *OrderedConsumer) park(pq processQueue, rec *txmsg.Received, cause error) bool {
	for n := 1; ; n++ {
		err := driver.ParkFailed(c.inbox, c.handlerCtx, c.cfg.Group, rec, cause)
		if err == nil {
			c.counts.Parked()
			c.log.Error("handler failed on its last attempt; message parked in the inbox's parked table and its queue goes on",
				withErr([]any{"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "broker_msg_id", rec.BrokerMessageID,
					"attempt", rec.Attempt}, cause)...)
			return true
		}
		c.log.Error("cannot park a message; its queue waits", "txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "err", err)
		if !c.sleep(pq, c.backoff(n)) {
			return false
		}
	}
}

// backoff is the wait after the n-th failed attempt.
func (c *OrderedConsumer) backoff(n int) time.Duration {
	d := c.cfg.MinBackoff
	for i := 1; i < n && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxBackoff)
}

// sleep waits d unless the queue is taken away or the consumer closes
// first; it reports whether the queue may go on.
func (c *OrderedConsumer) sleep(pq processQueue, d time.Duration) bool {
	deadline := time.Now().Add(d)
	t := time.NewTicker(orderedDropCheck)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-c.closing:
			return false
		case <-t.C:
			if pq.IsDroppd() {
				return false
			}
		}
	}
	return !pq.IsDroppd()
}

// persist writes acknowledged offsets to the broker at most every
// orderedPersistEvery, so that a queue's next owner (after a crash, say)
// starts close to where this one stopped.
func (c *OrderedConsumer) persist() {
	defer c.loops.Done()
	t := time.NewTicker(orderedPersistEvery)
	defer t.Stop()
	for {
		select {
		case <-c.closing:
			return
		case <-t.C:
		}
		select {
		case <-c.acked:
			if err := c.pc.PersistOffset(context.Background(), ""); err != nil {
				c.log.Debug("persist offsets", "err", err)
			}
		default:
		}
	}
}

// Close stops handling, waits for running handlers to commit or roll back,
// then leaves the group and shuts the client down, saving the offsets of
// what was acknowledged. If ctx ends first, the running handlers' contexts
// are cancelled so their transactions roll back, and Close returns ctx's
// error after shutting down.
func (c *OrderedConsumer) Close(ctx context.Context) error {
	return c.closeConsumer(ctx, nil, func() {
		c.loops.Wait()
		c.queues.Wait()
	}, nil)
}

// Health reports whether the consumer can do its work now, as
// [Consumer.Health] does.
func (c *OrderedConsumer) Health(ctx context.Context) error { return c.health(ctx) }

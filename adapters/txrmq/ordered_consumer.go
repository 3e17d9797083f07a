package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
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

// OrderedConsumerConfig configures an [OrderedConsumer]. Config.Group is
// the consumer group, as for [ConsumerConfig]; a group must be consumed
// either by ordered consumers or by concurrent ones, not both. A new group
// starts where [ConsumerConfig] says, and Start records that start on the
// broker the same way.
type OrderedConsumerConfig struct {
	Config
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
	// and DefaultOrderedMaxBackoff (30 s); with 16 retries a message is
	// parked about 6 minutes after its first failure.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// OnProcessed, when set, is called after every attempt: outcome is
	// what the inbox did when err is nil (OutcomeParked also for a message
	// given up after MaxReconsumeTimes); a non-nil err means the same
	// message is retried after a backoff. Attempts interrupted because the
	// consumer is closing are not reported. It runs on the queue's
	// goroutine; keep it fast. Meant for metrics and tests.
	OnProcessed func(r *txmsg.Received, outcome txmsg.Outcome, err error)
}

func (c *OrderedConsumerConfig) validate() error {
	if err := c.Config.validate("ordered consumer"); err != nil {
		return err
	}
	switch {
	case c.Concurrency < 0 || c.Concurrency > 1000:
		return fmt.Errorf("%w: ordered consumer: Concurrency must be between 1 and 1000 (0 means %d)", txmsg.ErrInvalidConfig, DefaultConcurrency)
	case c.MaxReconsumeTimes < 0 || c.MaxReconsumeTimes > math.MaxInt32:
		return fmt.Errorf("%w: ordered consumer: MaxReconsumeTimes must be positive (0 means %d)", txmsg.ErrInvalidConfig, DefaultMaxReconsumeTimes)
	case c.MinBackoff < 0 || c.MaxBackoff < 0:
		return fmt.Errorf("%w: ordered consumer: MinBackoff and MaxBackoff must not be negative", txmsg.ErrInvalidConfig)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxReconsumeTimes == 0 {
		c.MaxReconsumeTimes = DefaultMaxReconsumeTimes
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultOrderedMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultOrderedMaxBackoff, c.MinBackoff)
	}
	if c.MaxBackoff < c.MinBackoff {
		return fmt.Errorf("%w: ordered consumer: MaxBackoff %v is below MinBackoff %v", txmsg.ErrInvalidConfig, c.MaxBackoff, c.MinBackoff)
	}
	return nil
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
//     inbox's parked table (driver.ParkFailed), logged at error level,
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
	cfg    OrderedConsumerConfig
	inbox  *txmsg.Inbox
	routes map[string]txmsg.Route
	topics []string
	log    *slog.Logger
	pc     rmq.PullConsumer
	sem    chan struct{}
	rc     *reconnector
	// requeued counts the queues given up, at a broker's return, for
	// re-creation by the next rebalance because their pull was in flight
	// when the broker died.
	requeued atomic.Int64

	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	closing       chan struct{}
	loops         sync.WaitGroup // dispatcher and persister
	queues        sync.WaitGroup // queue workers
	acked         chan struct{}  // signals the persister; capacity 1

	mu       sync.Mutex
	started  bool
	closed   bool
	startErr error
}

// NewOrderedConsumer validates cfg and routes and builds an ordered
// consumer of cfg.Group that subscribes each route's topic and tag
// expression. Call Start to begin consuming. Every route must be valid
// and have its own topic.
func NewOrderedConsumer(cfg OrderedConsumerConfig, inbox *txmsg.Inbox, routes ...txmsg.Route) (*OrderedConsumer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if inbox == nil {
		return nil, fmt.Errorf("%w: ordered consumer: inbox is nil", txmsg.ErrInvalidConfig)
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("%w: ordered consumer: no routes; build them with txmsg.Handle", txmsg.ErrInvalidConfig)
	}
	byTopic := make(map[string]txmsg.Route, len(routes))
	var topics []string
	for i, r := range routes {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("ordered consumer: route %d: %w", i, err)
		}
		if _, dup := byTopic[r.Topic()]; dup {
			return nil, fmt.Errorf("%w: ordered consumer: two routes for topic %q; a group has one handler per topic", txmsg.ErrInvalidConfig, r.Topic())
		}
		byTopic[r.Topic()] = r
		topics = append(topics, r.Topic())
	}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	pc, err := rmq.NewPullConsumer(orderedOptions(&cfg.Config)...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new ordered consumer: %w", err)
	}
	for _, r := range routes {
		sel := consumer.MessageSelector{Type: consumer.TAG, Expression: r.Tags()}
		if err := pc.Subscribe(r.Topic(), sel); err != nil {
			return nil, fmt.Errorf("rocketmq: ordered consumer: subscribe %s: %w", r.Topic(), err)
		}
	}
	c := &OrderedConsumer{
		cfg:     cfg,
		inbox:   inbox,
		routes:  byTopic,
		topics:  topics,
		log:     cfg.Logger.With("component", "txmsg.ordered_consumer", "group", cfg.Group),
		pc:      pc,
		sem:     make(chan struct{}, cfg.Concurrency),
		closing: make(chan struct{}),
		acked:   make(chan struct{}, 1),
	}
	c.handlerCtx, c.cancelHandler = context.WithCancel(context.Background())
	return c, nil
}

func orderedOptions(c *Config) []consumer.Option {
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
func (c *OrderedConsumer) Start(ctx context.Context) error {
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
		return fmt.Errorf("rocketmq: start ordered consumer: %w", err)
	}
	if err := askTopicRoutes(ctx, &c.cfg.Config, c.brokerTopics()); err != nil {
		// The client has not started: Start may be called again.
		return fmt.Errorf("rocketmq: start ordered consumer of group %q: %w", c.cfg.Group, err)
	}
	if err := startWithin(ctx, c.pc, c.log, c.start); err != nil {
		c.startErr = fmt.Errorf("rocketmq: start ordered consumer of group %q: %w", c.cfg.Group, err)
		return c.startErr
	}
	c.started = true
	c.loops.Add(2)
	go c.dispatch()
	go c.persist()
	c.rc = watchConsumerBrokers(c.pc, c.log, c.brokerTopics())
	if c.rc != nil {
		c.rc.stuck = requeueStuckPulls(c.pc, c.log, &c.requeued)
	}
	c.rc.start()
	return nil
}

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

// brokerTopics are the consumer's topics as the broker knows them.
func (c *OrderedConsumer) brokerTopics() []string {
	topics := make([]string, 0, len(c.topics))
	for _, t := range c.topics {
		topics = append(topics, c.cfg.brokerTopic(t))
	}
	return topics
}

func (c *OrderedConsumer) start(ctx context.Context) error {
	if err := c.pc.Start(); err != nil {
		return explainRouteError(ctx, &c.cfg.Config, c.brokerTopics(), err)
	}
	// The client checks only the last subscribed topic.
	rs, ok := c.pc.(interface{ IsSubscribeTopicNeedUpdate(topic string) bool })
	if ok {
		var missing []string
		for _, t := range c.topics {
			if rs.IsSubscribeTopicNeedUpdate(c.cfg.brokerTopic(t)) {
				missing = append(missing, c.cfg.brokerTopic(t))
			}
		}
		if len(missing) > 0 {
			_ = shutdownConsumer(c.pc, c.log)
			if err := askTopicRoutes(ctx, &c.cfg.Config, missing); err != nil {
				return err
			}
			return missingTopicsError(strings.Join(c.cfg.NameServers, ","), missing)
		}
	}
	c.settle(rs)
	return startPinned(ctx, c.pc, c.brokerGroup(), c.brokerTopics(), c.log)
}

// settle runs one rebalance to completion, so that the queues this
// instance owns have their start offsets when Start returns (see
// Consumer.settle). The group's retry topic is waited for only briefly:
// an ordered consumer sends nothing there.
func (c *OrderedConsumer) settle(rs interface{ IsSubscribeTopicNeedUpdate(topic string) bool }) {
	cl := clientinternals.ConsumerClientOf(c.pc)
	if cl == nil || rs == nil {
		c.log.Debug("cannot reach the client's rebalance; queues are assigned in the background")
		return
	}
	retry := "%RETRY%" + c.brokerGroup()
	for deadline := time.Now().Add(2 * time.Second); rs.IsSubscribeTopicNeedUpdate(retry) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		cl.UpdateTopicRouteInfo()
	}
	cl.RebalanceImmediately()
}

func (c *OrderedConsumer) brokerGroup() string {
	if c.cfg.Namespace != "" {
		return c.cfg.Namespace + "%" + c.cfg.Group
	}
	return c.cfg.Group
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

func (c *OrderedConsumer) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
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
		c.observe(rec, outcome, err)
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
	return runRoute(ctx, r, c.inbox, c.cfg.Group, rec)
}

// runRoute calls driver.Process and turns a panic outside the handler (in a
// codec, say) into an error.
func runRoute(ctx context.Context, r txmsg.Route, in *txmsg.Inbox, group string, rec *txmsg.Received) (outcome txmsg.Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			outcome, err = 0, &txmsg.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return driver.Process(r, ctx, in, group, rec)
}

// park gives up on rec after cause and parks it, retrying the park itself
// (a database error) until it works or the queue is stopped.
func (c *OrderedConsumer) park(pq processQueue, rec *txmsg.Received, cause error) bool {
	for n := 1; ; n++ {
		err := driver.ParkFailed(c.inbox, c.handlerCtx, c.cfg.Group, rec, cause)
		if err == nil {
			c.log.Error("handler failed on its last attempt; message parked in the inbox's parked table and its queue goes on",
				withErr([]any{"txmsg_id", rec.Message.ID, "topic", rec.Message.Topic, "broker_msg_id", rec.BrokerMessageID,
					"attempt", rec.Attempt}, cause)...)
			c.observe(rec, txmsg.OutcomeParked, nil)
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

func (c *OrderedConsumer) observe(rec *txmsg.Received, outcome txmsg.Outcome, err error) {
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
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := c.started
	close(c.closing)
	c.mu.Unlock()
	defer c.cancelHandler()
	if !started {
		return nil
	}
	c.rc.close()
	done := make(chan struct{})
	go func() {
		c.loops.Wait()
		c.queues.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		c.cancelHandler()
		err = fmt.Errorf("rocketmq: ordered consumer close: handlers still running: %w", ctx.Err())
	}
	if serr := shutdownConsumer(c.pc, c.log); serr != nil {
		err = errors.Join(err, fmt.Errorf("rocketmq: ordered consumer shutdown: %w", serr))
	}
	return err
}

// Health reports whether the consumer can do its work now, as
// [Consumer.Health] does.
func (c *OrderedConsumer) Health(ctx context.Context) error {
	c.mu.Lock()
	started, closed, startErr := c.started, c.closed, c.startErr
	c.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("rocketmq: ordered consumer of group %q: %w", c.cfg.Group, txmsg.ErrClosed)
	case startErr != nil:
		return startErr
	case !started:
		return fmt.Errorf("rocketmq: ordered consumer of group %q is not started", c.cfg.Group)
	}
	if err := c.inbox.Ping(ctx); err != nil {
		return fmt.Errorf("rocketmq: ordered consumer of group %q: %w", c.cfg.Group, err)
	}
	rp, err := clientinternals.NameServers(c.pc)
	if err != nil {
		return fmt.Errorf("rocketmq: ordered consumer of group %q: %w", c.cfg.Group, err)
	}
	topics := make([]string, len(c.topics))
	for i, t := range c.topics {
		topics[i] = c.cfg.brokerTopic(t)
	}
	if err := askTopicRoutes(ctx, &c.cfg.Config, topics); err != nil {
		return fmt.Errorf("rocketmq: ordered consumer of group %q: %w", c.cfg.Group, err)
	}
	if err := probeRoutes(ctx, rp, topics); err != nil {
		return fmt.Errorf("rocketmq: ordered consumer of group %q: %w", c.cfg.Group, err)
	}
	return nil
}

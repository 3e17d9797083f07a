package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/heartbeat"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// consumerClient is what the core needs of the client's push or pull
// consumer.
type consumerClient interface {
	Start() error
	Shutdown() error
}

// consumerCore is what [Consumer] and [OrderedConsumer] share: the
// subscribed topics, Start (ask the name servers, start the client, settle
// the rebalance, record a new group's start offsets, watch the brokers),
// running one delivery through its route, Close's bookkeeping and Health.
// Each consumer embeds one and adds how messages reach its routes.
type consumerCore struct {
	kind   string // "consumer" or "ordered consumer", in errors
	conn   Conn
	group  string
	inbox  *txmsg.Inbox
	topics []string // the routes' topics, as configured
	log    *slog.Logger
	client consumerClient
	sem    chan struct{} // Concurrency slots

	// settleWait bounds how long Start waits for the group's retry topic;
	// warnUnsettled logs a warning when it runs out.
	settleWait    time.Duration
	warnUnsettled bool
	// checkEachTopic makes Start look up the route of every subscribed
	// topic after the client started (the pull consumer checks only the
	// last one).
	checkEachTopic bool
	// onStarted runs once the client started, before the brokers are
	// watched; nil does nothing.
	onStarted func()
	// requeue builds what the reconnector calls when brokers come back
	// (expireStuckPulls, requeueStuckPulls).
	requeue func(pc any, log *slog.Logger, count *atomic.Int64) func(map[string]time.Time)

	rc *reconnector
	// beat writes the instance's row from Start to Close; counts are its
	// counters.
	beatCfg fleet.Config
	beat    *heartbeat.Beat
	counts  heartbeat.Counters
	// requeued counts the queues re-created, at a broker's return,
	// because their pull was in flight when the broker died.
	requeued atomic.Int64

	// handlerCtx parents every handler's context. It is the consumer's own
	// lifetime, not a caller's context: Close cancels it when its caller
	// stops waiting, so running transactions roll back.
	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	// closing is closed when Close begins.
	closing chan struct{}

	mu       sync.RWMutex
	started  bool
	closed   bool
	startErr error
}

// init validates inbox and routes and sets up the core of a consumer of
// kind with the routes' topics; the caller sets client and the
// client-specific fields.
func (c *consumerCore) init(kind string, conn Conn, group string, concurrency int, inbox *txmsg.Inbox, routes []txmsg.Route, beat fleet.Config) error {
	if inbox == nil {
		return fmt.Errorf("%w: %s: inbox is nil", txmsg.ErrInvalidConfig, kind)
	}
	if len(routes) == 0 {
		return fmt.Errorf("%w: %s: no routes; build them with txmsg.Handle", txmsg.ErrInvalidConfig, kind)
	}
	seen := make(map[string]bool, len(routes))
	topics := make([]string, 0, len(routes))
	for i, r := range routes {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("%s: route %d: %w", kind, i, err)
		}
		if seen[r.Topic()] {
			return fmt.Errorf("%w: %s: two routes for topic %q; a group has one handler per topic", txmsg.ErrInvalidConfig, kind, r.Topic())
		}
		seen[r.Topic()] = true
		topics = append(topics, r.Topic())
	}
	c.kind, c.conn, c.group, c.inbox, c.topics, c.beatCfg = kind, conn, group, inbox, topics, beat
	c.log = conn.Logger.With("component", "txmsg."+strings.ReplaceAll(kind, " ", "_"), "group", group)
	c.sem = make(chan struct{}, concurrency)
	c.closing = make(chan struct{})
	c.handlerCtx, c.cancelHandler = context.WithCancel(context.Background())
	return nil
}

// consumerAccess maps the namespace, credentials and TLS settings to the
// consumer client's options.
func (c *Conn) consumerAccess() []consumer.Option {
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

// startConsumer is Start of both consumers: see [Consumer.Start].
func (c *consumerCore) startConsumer(ctx context.Context) error {
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
		return fmt.Errorf("rocketmq: start %s: %w", c.kind, err)
	}
	if err := askTopicRoutes(ctx, &c.conn, c.brokerTopics()); err != nil {
		// The client has not started: Start may be called again.
		return fmt.Errorf("rocketmq: start %s of group %q: %w", c.kind, c.group, err)
	}
	if err := startWithin(ctx, c.client, c.log, c.startClient); err != nil {
		c.startErr = fmt.Errorf("rocketmq: start %s of group %q: %w", c.kind, c.group, err)
		return c.startErr
	}
	c.started = true
	if c.onStarted != nil {
		c.onStarted()
	}
	c.rc = watchConsumerBrokers(c.client, &c.conn, c.log, c.brokerTopics())
	if c.rc != nil {
		c.rc.stuck = c.requeue(c.client, c.log, &c.requeued)
	}
	c.rc.start()
	c.beat = heartbeat.Start(c.inbox.DB(), c.beatCfg, strings.ReplaceAll(c.kind, " ", "_"), c.group, c.health, &c.counts, c.log)
	return nil
}

// startClient starts the client, then settles its first rebalance and
// records the group's start offsets.
func (c *consumerCore) startClient(ctx context.Context) error {
	if err := c.client.Start(); err != nil {
		return explainRouteError(ctx, &c.conn, c.brokerTopics(), err)
	}
	rs, _ := c.client.(interface{ IsSubscribeTopicNeedUpdate(topic string) bool })
	if c.checkEachTopic && rs != nil {
		var missing []string
		for _, t := range c.brokerTopics() {
			if rs.IsSubscribeTopicNeedUpdate(t) {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			_ = shutdownConsumer(c.client, c.log)
			if err := askTopicRoutes(ctx, &c.conn, missing); err != nil {
				return err
			}
			return missingTopicsError(strings.Join(c.conn.NameServers, ","), missing)
		}
	}
	c.settle(rs)
	return startPinned(ctx, c.client, c.brokerGroup(), c.brokerTopics(), c.log)
}

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
// behind the consumer through package clientinternals. If the pinned
// version's fields are not there, it does nothing and the client catches
// up on its own schedule.
func (c *consumerCore) settle(rs interface{ IsSubscribeTopicNeedUpdate(topic string) bool }) {
	cl := clientinternals.ConsumerClientOf(c.client)
	if cl == nil || rs == nil {
		c.log.Debug("cannot reach the client's rebalance; queues are assigned in the background")
		return
	}
	retry := "%RETRY%" + c.brokerGroup()
	for deadline := time.Now().Add(c.settleWait); rs.IsSubscribeTopicNeedUpdate(retry); {
		if time.Now().After(deadline) {
			if c.warnUnsettled {
				c.log.Warn("the group's retry topic has no route yet; redeliveries may wait for the client's next route refresh (up to 50 s)", "retry_topic", retry)
			}
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

// brokerTopics are the consumer's topics as the broker knows them.
func (c *consumerCore) brokerTopics() []string {
	topics := make([]string, 0, len(c.topics))
	for _, t := range c.topics {
		topics = append(topics, c.conn.brokerTopic(t))
	}
	return topics
}

// brokerGroup is the group's name on the broker, with the namespace.
func (c *consumerCore) brokerGroup() string {
	if c.conn.Namespace != "" {
		return c.conn.Namespace + "%" + c.group
	}
	return c.group
}

// run calls r.Process and turns a panic outside the handler (in a codec,
// say) into an error: a panic must not escape into the client, which would
// leave the message unanswered until the next rebalance.
func (c *consumerCore) run(ctx context.Context, r txmsg.Route, rec *txmsg.Received) (outcome txmsg.Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			outcome, err = 0, &txmsg.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	outcome, err = driver.Process(r, ctx, c.inbox, c.group, rec)
	c.counts.Consumed(outcome, err)
	return outcome, err
}

// isClosing reports whether Close has begun.
func (c *consumerCore) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// closeConsumer is Close of both consumers: it marks the consumer closed,
// stops watching the brokers, calls stop (nil: nothing) and waits for
// running (the consumer's handlers) until ctx ends, when it cancels the
// handlers' contexts; then it shuts the client down. The first call runs
// after (nil: nothing) last, when the client has shut down or was never
// started.
func (c *consumerCore) closeConsumer(ctx context.Context, stop, running, after func()) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := c.started
	close(c.closing)
	c.mu.Unlock()
	if after != nil {
		defer after()
	}
	defer c.cancelHandler()
	if !started {
		return nil
	}
	c.beat.Stop(ctx)
	c.rc.close()
	if stop != nil {
		stop()
	}
	done := make(chan struct{})
	go func() { running(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		c.cancelHandler()
		err = fmt.Errorf("rocketmq: %s close: handlers still running: %w", c.kind, ctx.Err())
	}
	if serr := shutdownConsumer(c.client, c.log); serr != nil {
		err = errors.Join(err, fmt.Errorf("rocketmq: %s shutdown: %w", c.kind, serr))
	}
	return err
}

// health is Health of both consumers: see [Consumer.Health].
func (c *consumerCore) health(ctx context.Context) error {
	c.mu.RLock()
	started, closed, startErr := c.started, c.closed, c.startErr
	c.mu.RUnlock()
	switch {
	case closed:
		return fmt.Errorf("rocketmq: %s of group %q: %w", c.kind, c.group, txmsg.ErrClosed)
	case startErr != nil:
		return startErr
	case !started:
		return fmt.Errorf("rocketmq: %s of group %q: %w", c.kind, c.group, txmsg.ErrNotStarted)
	}
	if err := c.inbox.Ping(ctx); err != nil {
		return fmt.Errorf("rocketmq: %s of group %q: %w", c.kind, c.group, err)
	}
	rp, err := clientinternals.NameServers(c.client)
	if err != nil {
		return fmt.Errorf("rocketmq: %s of group %q: %w", c.kind, c.group, err)
	}
	topics := c.brokerTopics()
	if err := askTopicRoutes(ctx, &c.conn, topics); err != nil {
		return fmt.Errorf("rocketmq: %s of group %q: %w", c.kind, c.group, err)
	}
	if err := probeRoutes(ctx, rp, topics); err != nil {
		return fmt.Errorf("rocketmq: %s of group %q: %w", c.kind, c.group, err)
	}
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
func watchConsumerBrokers(pc any, conn *Conn, log *slog.Logger, topics []string) *reconnector {
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
	return newReconnector(log, topics, rp, refresh).askingMasters(conn)
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

// shutdownConsumer shuts down a started push or pull consumer of the
// client. First it stops the consumer's pulls and makes it give up its
// queues, saving their consumed offsets (clientinternals.ReleaseQueues):
// the client's Shutdown closes each held queue's message channel, and a
// pull that was in flight, a broker long poll of up to 20 s, may still
// send on it when it returns, a data race and at worst a "send on closed
// channel" panic that ends the process. A released queue is not closed,
// and a pull that comes back on it stores nothing. Then it shuts the
// consumer down holding the client's rebalance lock, so that the rebalance
// Start began in the background does not race with Shutdown
// (clientinternals.RebalanceLockOf). If the pinned client's internals are
// not there, it shuts down as the client alone would.
func shutdownConsumer(pc interface{ Shutdown() error }, log *slog.Logger) error {
	if _, err := clientinternals.ReleaseQueues(pc); err != nil {
		log.Warn("could not release the consumer's queues before shutdown", "err", err)
	}
	if mu, err := clientinternals.RebalanceLockOf(pc); err == nil {
		mu.Lock()
		defer mu.Unlock()
	}
	return pc.Shutdown()
}

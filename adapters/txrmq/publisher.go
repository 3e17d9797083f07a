package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// DefaultMaxBatch is PublisherConfig.MaxBatch's default.
const DefaultMaxBatch = 128

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	Conn
	// Group is the producer group. Required.
	Group string
	// SendTimeout bounds one send to the broker. Default
	// [DefaultSendTimeout] (3 s).
	SendTimeout time.Duration
	// Retries is how many times the client retries a failed send.
	// Default [DefaultRetries] (2).
	Retries int
	// MaxBodySize is the largest body accepted; it should equal the
	// broker's maxMessageSize. Default [txmsg.DefaultMaxBodySize] (4 MiB).
	MaxBodySize int
	// Hooks observe the publisher's events (see txmsg.Hook): OnCheckBack
	// for the check-backs that reach it. A hook that implements no hook
	// interface is refused. Optional.
	Hooks txmsg.Hooks
	// MaxBatch is the most messages sent in one batch request. Messages to
	// the same topic (and, when ordered, the same sharding key) are batched
	// up to this count and up to MaxBodySize bytes. Default
	// [DefaultMaxBatch] (128); 1 turns batching off.
	MaxBatch int
	// Topics are fetched at Start, so the first sends to them do not each
	// look the route up (concurrent first sends to a new topic can fail
	// with "route info not found" in the client). Optional.
	Topics []string
	// Checker answers the transaction check-backs the broker sends to
	// this publisher. The broker sends a group's check-backs to any live
	// producer of the group, so a publisher that shares its group with
	// transactional producers (for example during a switch from
	// transactional to local-table mode) must answer them from the
	// barrier: give it the checker of that group's database. Without a
	// Checker, a check-back that reaches the publisher is answered UNKNOWN
	// at once and logged as a warning; the broker asks again later.
	Checker *checker.Checker
	// CheckBackWorkers and CheckBackQueue bound check-back answering as
	// in [TransactionalConfig]. Defaults [DefaultCheckBackWorkers] and
	// [DefaultCheckBackQueue].
	CheckBackWorkers int
	CheckBackQueue   int
}

// WithDefaults returns c with its zero fields set to their defaults. It
// checks nothing.
func (c PublisherConfig) WithDefaults() PublisherConfig {
	c.Conn = c.Conn.WithDefaults()
	c.SendTimeout, c.Retries, c.MaxBodySize = sendDefaults(c.SendTimeout, c.Retries, c.MaxBodySize)
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	c.CheckBackWorkers, c.CheckBackQueue = checkBackDefaults(c.CheckBackWorkers, c.CheckBackQueue)
	return c
}

// Validate checks c, which WithDefaults has filled in. The error wraps
// [txmsg.ErrInvalidConfig] and names the field.
func (c PublisherConfig) Validate() error {
	const what = "publisher"
	if err := validateClient(what, &c.Conn, c.Group); err != nil {
		return err
	}
	if err := validateProducer(what, c.SendTimeout, c.Retries, c.MaxBodySize, c.Hooks, c.Topics); err != nil {
		return err
	}
	if c.MaxBatch <= 0 {
		return fmt.Errorf("%w: %s: MaxBatch must be positive (0 means %d)", txmsg.ErrInvalidConfig, what, DefaultMaxBatch)
	}
	return validateCheckBackLimits(what, c.CheckBackWorkers, c.CheckBackQueue)
}

// producer is what the client's producer options need of c.
func (c *PublisherConfig) producer() producerSetup {
	return producerSetup{conn: &c.Conn, group: c.Group, sendTimeout: c.SendTimeout, retries: c.Retries}
}

// Publisher sends messages right away through a plain RocketMQ producer.
// It implements [txmsg.Publisher]; the local-table mode's relay uses it.
type Publisher struct {
	cfg  PublisherConfig
	prod rmq.Producer            // sends
	tp   rmq.TransactionProducer // owns prod and receives check-backs; nil if prod is a plain producer
	cb   *checkBacks
	log  *slog.Logger
	rc   *reconnector
	// returns tells subscribers that a broker came back
	// (NotifyBrokerReturn); the reconnector fires it.
	returns returnSignal

	mu      sync.RWMutex
	started bool
	closed  bool
	wg      sync.WaitGroup
}

var (
	_ txmsg.Publisher            = (*Publisher)(nil)
	_ txmsg.BrokerReturnNotifier = (*Publisher)(nil)
)

// NewPublisher builds a plain producer, after filling cfg's defaults and
// validating it (see [PublisherConfig.WithDefaults] and
// [PublisherConfig.Validate]). Call Start before Publish. Sends made
// through it go out at once; there is no transaction.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hooks, err := driver.BindHooks(cfg.Hooks, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	cfg.Hooks = hooks
	limits := checkBackLimits{workers: cfg.CheckBackWorkers, queue: cfg.CheckBackQueue}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	p := &Publisher{cfg: cfg, log: cfg.Logger.With("component", "txmsg.publisher", "group", cfg.Group)}
	var answer func(context.Context, *primitive.MessageExt) primitive.LocalTransactionState
	if cfg.Checker != nil {
		answer = func(ctx context.Context, ext *primitive.MessageExt) primitive.LocalTransactionState {
			return resolveFromBarrier(ctx, cfg.Checker, p.log, cfg.Hooks, cfg.Group, ext)
		}
	}
	p.cb = newCheckBacks(p.log, cfg.Hooks, cfg.Group, limits, answer)
	// The sends go through the transaction producer's inner producer, so
	// that the publisher has the client's check-back reader.
	tp, err := newCheckBackProducer(cfg.producer(), "pub", p.cb, pubListener{p.cb})
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new publisher: %w", err)
	}
	if inner, err := clientinternals.InnerProducer(tp); err == nil {
		if prod, ok := inner.(rmq.Producer); ok {
			p.prod, p.tp = prod, tp
			return p, nil
		}
	}
	p.log.Warn("cannot send through the client's transaction producer; check-backs that reach this publisher stay unanswered")
	p.cb.in = nil
	if p.prod, err = rmq.NewProducer(producerOptions(cfg.producer(), "pub")...); err != nil {
		return nil, fmt.Errorf("rocketmq: new publisher: %w", err)
	}
	return p, nil
}

// pubListener answers the check-backs that reach a Publisher. It never
// runs local transactions: the publisher sends no half messages.
type pubListener struct{ cb *checkBacks }

func (pubListener) ExecuteLocalTransaction(*primitive.Message) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

func (l pubListener) CheckLocalTransaction(ext *primitive.MessageExt) primitive.LocalTransactionState {
	return l.cb.check(ext)
}

// Start connects the producer and fetches the routes of the configured
// Topics. It is idempotent.
//
// Start first asks the name servers, each within
// Conn.NameServerTimeout. When none answers, Start logs a warning that
// names each name server and its error, and starts without fetching
// routes: Publish fails with txmsg.ErrUnavailable until a name server
// answers. When ctx ends first, Start returns its error and does not
// start.
func (p *Publisher) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return txmsg.ErrClosed
	case p.started:
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rocketmq: start publisher: %w", err)
	}
	answered, err := askProducerNameServers(ctx, &p.cfg.Conn, p.cfg.Topics, p.log)
	if err != nil {
		return fmt.Errorf("rocketmq: start publisher of group %q: %w", p.cfg.Group, err)
	}
	p.cb.start()
	start := p.prod.Start
	if p.tp != nil {
		start = p.tp.Start
	}
	if err := start(); err != nil {
		return fmt.Errorf("rocketmq: start publisher: %w", err)
	}
	p.started = true
	if len(p.cfg.Topics) > 0 && answered {
		if err := clientinternals.WarmProducer(p.prod, p.cfg.Topics); err != nil {
			p.log.Warn("cannot pre-fetch topic routes; the first sends look them up", "topics", p.cfg.Topics, "err", err)
		}
	}
	p.rc = p.newReconnector()
	p.rc.start()
	return nil
}

// producerSetup is what a producer's client options are made of.
type producerSetup struct {
	conn        *Conn
	group       string
	sendTimeout time.Duration
	retries     int
}

// producerOptions are the client options every txmsg producer shares: a
// unique instance name so no two producers share a client, credentials,
// namespace, the sharding-key selector.
func producerOptions(p producerSetup, kind string) []producer.Option {
	c := p.conn
	opts := []producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver(c.NameServers)),
		producer.WithGroupName(p.group),
		producer.WithInstanceName(fmt.Sprintf("txmsg-%s-%d-%s", kind, os.Getpid(), txmsg.NewID())),
		producer.WithSendMsgTimeout(p.sendTimeout),
		producer.WithRetry(p.retries),
		producer.WithQueueSelector(newShardSelector()),
	}
	if c.Namespace != "" {
		opts = append(opts, producer.WithNamespace(c.Namespace))
	}
	if c.AccessKey != "" {
		opts = append(opts, producer.WithCredentials(c.credentials()))
	}
	if c.TLS {
		opts = append(opts, producer.WithTls(true))
	}
	return opts
}

func (p *Publisher) enter() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case p.closed:
		return txmsg.ErrClosed
	case !p.started:
		return fmt.Errorf("rocketmq: publisher of group %q: %w; call Start first", p.cfg.Group, txmsg.ErrNotStarted)
	}
	p.wg.Add(1)
	return nil
}

// Publish implements [txmsg.Publisher]. Messages without an ID get one.
// Messages to one topic are sent as batches; messages with a sharding key
// are batched per key and keep their order.
//
// Errors say what failed: a message the broker refused (it answered
// MESSAGE_ILLEGAL, NO_PERMISSION for the topic, or a batch too large)
// wraps
// [txmsg.ErrRejected], and when the broker refuses a batch its messages
// are sent again one by one to find the one it refuses; every other
// failure of the send (no route, the name server or broker unreachable, a
// timeout, the broker busy, not writable, or any other answer) wraps
// [txmsg.ErrUnavailable]. When all messages failed the same way the error
// is that one error, else a [*txmsg.BatchError].
func (p *Publisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := p.enter(); err != nil {
		return err
	}
	defer p.wg.Done()
	errs := make([]error, len(msgs))
	failed := 0
	for i, m := range msgs {
		err := m.Validate(p.cfg.MaxBodySize)
		if err == nil && m.Delay > 0 {
			err = fmt.Errorf("%w: a Publisher sends at once; send a delayed message through a Transactor (outbox or Transactional)", txmsg.ErrInvalidMessage)
		}
		if err != nil {
			errs[i] = err
			failed++
			continue
		}
		if m.ID == "" {
			m.ID = txmsg.NewID()
		}
	}
	for _, b := range p.batches(msgs, errs) {
		if err := ctx.Err(); err != nil {
			for _, i := range b.idx {
				errs[i] = err
			}
			failed += len(b.idx)
			continue
		}
		p.rc.watch(p.cfg.brokerTopic(b.topic))
		err := p.send(ctx, msgs, b.idx, b.key)
		if err != nil && len(b.idx) > 1 && errors.Is(err, txmsg.ErrRejected) {
			// The broker refused the batch: find out which message it
			// refuses by sending them one by one, in order.
			for _, i := range b.idx {
				if errs[i] = p.send(ctx, msgs, []int{i}, ""); errs[i] != nil {
					failed++
				}
			}
			continue
		}
		if err != nil {
			for _, i := range b.idx {
				errs[i] = err
			}
			failed += len(b.idx)
		}
	}
	if failed == 0 {
		return nil
	}
	if u := uniqueErrs(errs); failed == len(msgs) && len(u) == 1 {
		return fmt.Errorf("rocketmq: publish: %w", u[0])
	}
	return &txmsg.BatchError{Errs: errs}
}

// PublishToGroup implements [txmsg.GroupPublisher]: it sends msg to the
// retry topic of group, %RETRY%<group>, which every consumer of the group
// (Consumer and OrderedConsumer alike) reads and no other group does. The
// message keeps its txmsg ID, and consumers see it as msg.Topic (the
// client's RETRY_TOPIC property and txmsg's own topic property name it),
// so the group's inbox drops it if it handled it before. The broker
// counts it as the group's first attempt.
//
// A group the broker does not know (no consumer of it ever started)
// wraps [txmsg.ErrRejected]. A Publisher with a Namespace refuses it
// ([txmsg.ErrInvalidConfig]): the client would put the namespace in front
// of the retry topic's prefix rather than inside it.
func (p *Publisher) PublishToGroup(ctx context.Context, group string, msg *txmsg.Message) error {
	if !groupPattern.MatchString(group) {
		return fmt.Errorf("%w: rocketmq: publish to group: group %q must be 1-255 characters of [a-zA-Z0-9_-%%|]", txmsg.ErrInvalidConfig, group)
	}
	if p.cfg.Namespace != "" {
		return fmt.Errorf("%w: rocketmq: publish to group %q: not supported with a Namespace (%q)", txmsg.ErrInvalidConfig, group, p.cfg.Namespace)
	}
	if err := msg.Validate(p.cfg.MaxBodySize); err != nil {
		return err
	}
	if msg.ID == "" {
		msg.ID = txmsg.NewID()
	}
	if err := p.enter(); err != nil {
		return err
	}
	defer p.wg.Done()
	// The broker creates a group's retry topic when a consumer of the
	// group first reaches it. Without a route the send would create the
	// topic from the broker's default one (autoCreateTopicEnable) and the
	// message would wait there for a group that does not exist.
	retry := retryTopicPrefix + group
	rp, err := clientinternals.NameServers(p.prod)
	if err != nil {
		return fmt.Errorf("%w: rocketmq: publish %s to group %q: cannot look up the group's retry topic: %w", txmsg.ErrUnavailable, msg.ID, group, err)
	}
	if mqs, err := fetchRoute(ctx, rp, retry); err != nil || len(mqs) == 0 {
		if err != nil && !strings.Contains(err.Error(), "route info not found") {
			return fmt.Errorf("%w: rocketmq: publish %s to group %q: route of %s: %w", txmsg.ErrUnavailable, msg.ID, group, retry, err)
		}
		return fmt.Errorf("%w: rocketmq: publish %s to group %q: the name servers route no %s, so no consumer of the group has reached the brokers; start one first",
			txmsg.ErrRejected, msg.ID, group, retry)
	}
	pm := toPrimitive(msg)
	pm.Topic = retry
	pm.WithProperty(primitive.PropertyRetryTopic, msg.Topic)
	res, err := p.prod.SendSync(ctx, pm)
	if err != nil {
		return fmt.Errorf("rocketmq: publish %s to group %q: %w", msg.ID, group, classifySendError(err))
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("%w: rocketmq: publish %s to group %q: broker answered status %d", txmsg.ErrUnavailable, msg.ID, group, res.Status)
	}
	return nil
}

// retryTopicPrefix starts the retry topic of every consumer group.
const retryTopicPrefix = "%RETRY%"

type batch struct {
	topic, key string
	idx        []int
	size       int
}

// batches groups the valid messages by topic and sharding key, in order,
// into chunks the broker accepts.
func (p *Publisher) batches(msgs []*txmsg.Message, errs []error) []*batch {
	var out []*batch
	open := map[[2]string]*batch{}
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		k := [2]string{m.Topic, m.ShardingKey}
		size := len(m.Body) + 256
		for pk, pv := range m.Properties {
			size += len(pk) + len(pv) + 2
		}
		b := open[k]
		if b == nil || len(b.idx) >= p.cfg.MaxBatch || b.size+size > p.cfg.MaxBodySize {
			b = &batch{topic: m.Topic, key: m.ShardingKey}
			open[k] = b
			out = append(out, b)
		}
		b.idx = append(b.idx, i)
		b.size += size
	}
	return out
}

func (p *Publisher) send(ctx context.Context, msgs []*txmsg.Message, idx []int, key string) error {
	pms := make([]*primitive.Message, len(idx))
	for j, i := range idx {
		pms[j] = toPrimitive(msgs[i])
	}
	if len(pms) > 1 && key != "" {
		markBatchKey(pms[0], key)
	}
	topic := msgs[idx[0]].Topic
	res, err := p.prod.SendSync(ctx, pms...)
	if err != nil {
		p.rc.kick()
		return fmt.Errorf("send %d message(s) to %s: %w", len(pms), topic, classifySendError(err))
	}
	if res.Status != primitive.SendOK {
		// Stored, but not flushed or replicated in time: the broker's
		// trouble, and a retry may duplicate.
		return fmt.Errorf("%w: send %d message(s) to %s: broker answered status %d", txmsg.ErrUnavailable, len(pms), topic, res.Status)
	}
	return nil
}

// Broker response codes that refuse the message itself (RocketMQ's
// ResponseCode).
const (
	codeSystemError    = 1  // mostly the broker's trouble; also an oversized batch
	codeMessageIllegal = 13 // body or properties too long, bad property
	codeNoPermission   = 16 // the topic, or the whole broker, not writable
)

// classifySendError wraps an error of SendSync as txmsg.ErrRejected when
// the broker answered that it refuses the message, else as
// txmsg.ErrUnavailable. An oversized batch is rejected too: Publish then
// sends its messages one by one. The client reports a broker's answer as
// "CODE: <n>, DESC: <remark>"; everything else (no route, a connection
// refused or closed, a timeout, a producer not running) never reached a
// broker's verdict on the message.
func classifySendError(err error) error {
	var code int
	var desc string
	if n, _ := fmt.Sscanf(err.Error(), "CODE: %d, DESC: ", &code); n == 1 {
		_, desc, _ = strings.Cut(err.Error(), "DESC: ")
	}
	switch {
	case code == codeMessageIllegal:
		return fmt.Errorf("%w: %w", txmsg.ErrRejected, err)
	case code == codeSystemError && strings.Contains(desc, "size exceeded"):
		// A batch larger than maxMessageSize: "message body size exceeded".
		return fmt.Errorf("%w: %w", txmsg.ErrRejected, err)
	case code == codeNoPermission && !strings.Contains(strings.ToLower(desc), "broker["):
		// "the topic[…] sending message is forbidden" or a topic the
		// broker does not let clients write; a broker that is read-only
		// as a whole says "the broker[…]" and is unavailable.
		return fmt.Errorf("%w: %w", txmsg.ErrRejected, err)
	default:
		return fmt.Errorf("%w: %w", txmsg.ErrUnavailable, err)
	}
}

func uniqueErrs(errs []error) []error {
	seen := map[string]bool{}
	var out []error
	for _, err := range errs {
		if err != nil && !seen[err.Error()] {
			seen[err.Error()] = true
			out = append(out, err)
		}
	}
	return out
}

// Close stops new publishes, waits for those under way (or for ctx), then
// shuts the producer down and ends every goroutine it started, the
// client's check-back reader included.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	started := p.started
	p.mu.Unlock()
	p.cb.beginClose()
	defer p.cb.finish()
	if !started {
		p.cb.stopWorkers()
		return nil
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("rocketmq: publisher close: %w", ctx.Err())
	}
	p.cb.stopWorkers()
	p.rc.close()
	shutdown := p.prod.Shutdown
	if p.tp != nil {
		shutdown = p.tp.Shutdown
	}
	if serr := shutdown(); serr != nil && err == nil {
		err = fmt.Errorf("rocketmq: publisher shutdown: %w", serr)
	}
	return err
}

func (p *Publisher) newReconnector() *reconnector {
	rp, err := clientinternals.NameServers(p.prod)
	if err != nil {
		p.log.Warn("cannot watch brokers; after a broker restart the client recovers on its 30 s timers", "err", err)
		return nil
	}
	refresh, err := clientinternals.ProducerRefresher(p.prod)
	if err != nil {
		p.log.Warn("cannot watch brokers; after a broker restart the client recovers on its 30 s timers", "err", err)
		return nil
	}
	topics := make([]string, 0, len(p.cfg.Topics))
	for _, topic := range p.cfg.Topics {
		topics = append(topics, p.cfg.brokerTopic(topic))
	}
	rc := newReconnector(p.log, topics, rp, refresh).askingMasters(&p.cfg.Conn)
	if rc != nil {
		rc.returned = p.returns.fire
	}
	return rc
}

// NotifyBrokerReturn implements [txmsg.BrokerReturnNotifier]: the channel
// receives a value when a broker of the topics in
// [PublisherConfig.Topics], or of a topic this Publisher has sent to,
// accepts TCP connections again after it did not (the Publisher checks
// every 500 ms), once the client's routes have been refreshed; and again
// after each of the 15 refreshes, one a second, that follow while the
// broker starts up. The outbox relay subscribes to it, so the rows that
// wait for the broker are retried as soon as it is back.
//
// Without access to the client's internals (a warning at Start says so)
// the Publisher does not watch its brokers and the channel stays silent.
// It may be called before Start.
func (p *Publisher) NotifyBrokerReturn() (returned <-chan struct{}, stop func()) {
	return p.returns.subscribe()
}

// sendOne sends one message the caller built, such as a [Forwarder]'s
// message with the broker's delay properties, with Publish's error
// classes.
func (p *Publisher) sendOne(ctx context.Context, pm *primitive.Message) error {
	if err := p.enter(); err != nil {
		return err
	}
	defer p.wg.Done()
	p.rc.watch(p.cfg.brokerTopic(pm.Topic))
	res, err := p.prod.SendSync(ctx, pm)
	if err != nil {
		p.rc.kick()
		return fmt.Errorf("send to %s: %w", pm.Topic, classifySendError(err))
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("%w: send to %s: broker answered status %d", txmsg.ErrUnavailable, pm.Topic, res.Status)
	}
	return nil
}

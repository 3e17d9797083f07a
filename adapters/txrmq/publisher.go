package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	Config
	// MaxBatch is the most messages sent in one batch request. Messages to
	// the same topic (and, when ordered, the same sharding key) are batched
	// up to this count and up to MaxBodySize bytes. Default 128; 1 turns
	// batching off.
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

// Publisher sends messages right away through a plain RocketMQ producer.
// It implements [txmsg.Publisher]; the local-table mode's relay uses it.
type Publisher struct {
	cfg  PublisherConfig
	prod rmq.Producer            // sends
	tp   rmq.TransactionProducer // owns prod and receives check-backs; nil if prod is a plain producer
	cb   *checkBacks
	log  *slog.Logger

	mu      sync.RWMutex
	started bool
	closed  bool
	wg      sync.WaitGroup
}

var _ txmsg.Publisher = (*Publisher)(nil)

// NewPublisher validates cfg and builds a plain producer. Call Start before
// Publish. Sends made through it go out at once; there is no transaction.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.validate("publisher"); err != nil {
		return nil, err
	}
	if cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("%w: publisher: MaxBatch must not be negative", txmsg.ErrInvalidConfig)
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 128
	}
	for _, t := range cfg.Topics {
		if err := txmsg.ValidateTopic(t); err != nil {
			return nil, fmt.Errorf("%w: publisher: %w", txmsg.ErrInvalidConfig, err)
		}
	}
	limits := checkBackLimits{workers: cfg.CheckBackWorkers, queue: cfg.CheckBackQueue}
	if err := limits.validate("publisher"); err != nil {
		return nil, err
	}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	p := &Publisher{cfg: cfg, log: cfg.Logger.With("component", "txmsg.publisher", "group", cfg.Group)}
	var answer func(context.Context, *primitive.MessageExt) primitive.LocalTransactionState
	if cfg.Checker != nil {
		answer = func(ctx context.Context, ext *primitive.MessageExt) primitive.LocalTransactionState {
			return resolveFromBarrier(ctx, cfg.Checker, p.log, cfg.Hooks, ext)
		}
	}
	p.cb = newCheckBacks(p.log, cfg.Hooks, limits, answer)
	// The sends go through the transaction producer's inner producer, so
	// that the publisher has the client's check-back reader.
	tp, err := newCheckBackProducer(&cfg.Config, "pub", p.cb, pubListener{p.cb})
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new publisher: %w", err)
	}
	if inner, err := innerProducer(tp); err == nil {
		if prod, ok := inner.Interface().(rmq.Producer); ok {
			p.prod, p.tp = prod, tp
			return p, nil
		}
	}
	p.log.Warn("cannot send through the client's transaction producer; check-backs that reach this publisher stay unanswered")
	p.cb.in = nil
	if p.prod, err = rmq.NewProducer(producerOptions(&cfg.Config, "pub")...); err != nil {
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
	p.cb.start()
	start := p.prod.Start
	if p.tp != nil {
		start = p.tp.Start
	}
	if err := start(); err != nil {
		return fmt.Errorf("rocketmq: start publisher: %w", err)
	}
	p.started = true
	if len(p.cfg.Topics) > 0 {
		if err := warmProducerRoutes(p.prod, p.cfg.Topics); err != nil {
			p.log.Warn("cannot pre-fetch topic routes; the first sends look them up", "topics", p.cfg.Topics, "err", err)
		}
	}
	return nil
}

// producerOptions are the client options every txmsg producer shares: a
// unique instance name so no two producers share a client, credentials,
// namespace, the sharding-key selector.
func producerOptions(c *Config, kind string) []producer.Option {
	opts := []producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver(c.NameServers)),
		producer.WithGroupName(c.Group),
		producer.WithInstanceName(fmt.Sprintf("txmsg-%s-%d-%s", kind, os.Getpid(), txmsg.NewID())),
		producer.WithSendMsgTimeout(c.SendTimeout),
		producer.WithRetry(c.Retries),
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
		return errors.New("rocketmq: publisher not started; call Start first")
	}
	p.wg.Add(1)
	return nil
}

// Publish implements [txmsg.Publisher]. Messages without an ID get one.
// Messages to one topic are sent as batches; messages with a sharding key
// are batched per key and keep their order.
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
		if err := m.Validate(p.cfg.MaxBodySize); err != nil {
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
		if err := p.send(ctx, msgs, b); err != nil {
			for _, i := range b.idx {
				errs[i] = err
			}
			failed += len(b.idx)
		}
	}
	if failed == 0 {
		return nil
	}
	if failed == len(msgs) {
		return fmt.Errorf("rocketmq: publish: %w", errors.Join(uniqueErrs(errs)...))
	}
	return &txmsg.BatchError{Errs: errs}
}

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

func (p *Publisher) send(ctx context.Context, msgs []*txmsg.Message, b *batch) error {
	pms := make([]*primitive.Message, len(b.idx))
	for j, i := range b.idx {
		pms[j] = toPrimitive(msgs[i])
	}
	if len(pms) > 1 && b.key != "" {
		markBatchKey(pms[0], b.key)
	}
	res, err := p.prod.SendSync(ctx, pms...)
	if err != nil {
		return fmt.Errorf("send %d message(s) to %s: %w", len(pms), b.topic, err)
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("send %d message(s) to %s: broker answered status %d", len(pms), b.topic, res.Status)
	}
	return nil
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
	shutdown := p.prod.Shutdown
	if p.tp != nil {
		shutdown = p.tp.Shutdown
	}
	if serr := shutdown(); serr != nil && err == nil {
		err = fmt.Errorf("rocketmq: publisher shutdown: %w", serr)
	}
	return err
}

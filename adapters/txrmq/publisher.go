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

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/txmsg"
)

// DefaultMaxBatch is PublisherConfig.MaxBatch's default.
const DefaultMaxBatch = 128

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	Config
	// MaxBatch is the most messages sent in one batch request. Messages to
	// the same topic (and, when ordered, the same sharding key) are batched
	// up to this count and up to MaxBodySize bytes. Default
	// [DefaultMaxBatch] (128); 1 turns batching off.
	MaxBatch int
	// Topics are fetched at Start, so the first sends to them do not each
	// look the route up (concurrent first sends to a new topic can fail
	// with "route info not found" in the client). Optional.
	Topics []string
}

// Publisher sends messages right away through a plain RocketMQ producer.
// It implements [txmsg.Publisher]; the local-table mode's relay uses it.
type Publisher struct {
	cfg  PublisherConfig
	prod rmq.Producer
	log  *slog.Logger
	rc   *reconnector

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
	if err := cfg.noHooks("publisher", "a relay's batches are observed through outbox.RelayConfig.Hooks"); err != nil {
		return nil, err
	}
	if cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("%w: publisher: MaxBatch must not be negative", txmsg.ErrInvalidConfig)
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	for _, t := range cfg.Topics {
		if err := txmsg.ValidateTopic(t); err != nil {
			return nil, fmt.Errorf("%w: publisher: %w", txmsg.ErrInvalidConfig, err)
		}
	}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	opts := producerOptions(&cfg.Config, "pub")
	p, err := rmq.NewProducer(opts...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new publisher: %w", err)
	}
	return &Publisher{cfg: cfg, prod: p, log: cfg.Logger.With("component", "txmsg.publisher", "group", cfg.Group)}, nil
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
	if err := p.prod.Start(); err != nil {
		return fmt.Errorf("rocketmq: start publisher: %w", err)
	}
	p.started = true
	if len(p.cfg.Topics) > 0 {
		if err := clientinternals.WarmProducer(p.prod, p.cfg.Topics); err != nil {
			p.log.Warn("cannot pre-fetch topic routes; the first sends look them up", "topics", p.cfg.Topics, "err", err)
		}
	}
	p.rc = p.newReconnector()
	p.rc.start()
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
		return fmt.Errorf("rocketmq: publisher of group %q: %w; call Start first", p.cfg.Group, txmsg.ErrNotStarted)
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
		p.rc.kick()
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
// shuts the producer down.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	started := p.started
	p.mu.Unlock()
	if !started {
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
	p.rc.close()
	if serr := p.prod.Shutdown(); serr != nil && err == nil {
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
	return newReconnector(p.log, topics, rp, refresh)
}

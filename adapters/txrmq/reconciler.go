package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/internal/rmqwire"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// Reconciler defaults.
const (
	// DefaultReconcileWindow is ReconcilerConfig.Window's default.
	DefaultReconcileWindow = 2 * time.Minute
	// DefaultReconcileInterval is ReconcilerConfig.Interval's default.
	DefaultReconcileInterval = 10 * time.Second
	// DefaultReconcileConcurrency is ReconcilerConfig.Concurrency's default.
	DefaultReconcileConcurrency = 8
	// DefaultReconcileBatch is ReconcilerConfig.Batch's default.
	DefaultReconcileBatch = 500
	// DefaultReconcileQueryTimeout is ReconcilerConfig.QueryTimeout's
	// default.
	DefaultReconcileQueryTimeout = 3 * time.Second
	// DefaultKeepMessagesFor is ReconcilerConfig.KeepMessagesFor's
	// default.
	DefaultKeepMessagesFor = 30 * time.Minute
)

// CommittedSource is where a [Reconciler] reads the committed events of a
// window: [checker.Checker] in transactional mode (with
// checker.Config.KeepMessages), [outbox.Outbox] in local-table mode.
//
// Committed reads one page of the events committed in [since, until),
// ordered by txmsg ID, of up to limit events whose ID sorts after after.
// It returns the messages, how many events of the page keep no message
// to publish again (unkept), and the after of the next page, "" after the
// last. Now returns the time on the clock that stamps the events.
//
// [checker.Checker]: https://pkg.go.dev/github.com/txmsg/txmsg/checker#Checker
// [outbox.Outbox]: https://pkg.go.dev/github.com/txmsg/txmsg/adapters/outbox#Outbox
type CommittedSource interface {
	Committed(ctx context.Context, since, until time.Time, after string, limit int) (msgs []*txmsg.Message, next string, unkept int, err error)
	Now(ctx context.Context) (time.Time, error)
}

// ReconcilerConfig configures a [Reconciler].
type ReconcilerConfig struct {
	// Conn reaches the name servers; the reconciler asks them and the
	// brokers with requests of its own (no client is started), so only
	// NameServers, Namespace, TLS and Logger are used. A cluster with ACL
	// on must allow the reconciler's unsigned reads (route, runtime info,
	// query by key). Required.
	Conn
	// Name names the reconciler in its logs and hooks. Default
	// "reconciler".
	Name string
	// Window is how far before a change of a broker group's master the
	// committed events are checked: the longest stretch of acknowledged
	// writes a failover or a restart may lose (the replication lag of an
	// asynchronous slave, or the unflushed tail of an asynchronous flush),
	// with margin. Default [DefaultReconcileWindow] (2 minutes).
	Window time.Duration
	// Interval is how often the name servers' broker table and each
	// master's runtime information are read to notice a change. Default
	// [DefaultReconcileInterval] (10 s).
	Interval time.Duration
	// Concurrency is how many lookups by key run at once. Default
	// [DefaultReconcileConcurrency].
	Concurrency int
	// Batch is how many events are read from the database and checked
	// per page. Default [DefaultReconcileBatch].
	Batch int
	// QueryTimeout bounds one request to a name server or a broker.
	// Default [DefaultReconcileQueryTimeout] (3 s).
	QueryTimeout time.Duration
	// DelayTopic is the topic delayed transactional messages wait in
	// ([TransactionalConfig.DelayTopic]): a delayed event is present when
	// its topic or this one has it, and one missing that is not due yet is
	// published again to this topic, for a [Forwarder] to send on at its
	// due time, never earlier. Default [DefaultDelayTopic].
	DelayTopic string
	// DryRun reports the missing events without publishing them again.
	DryRun bool
	// KeepMessagesFor is how long barrier rows keep their messages
	// (checker.Config.KeepMessages): while it watches, the reconciler
	// clears, every Interval, the kept messages of rows older than this,
	// so that the barrier holds bodies for a bounded time, not until its
	// purge. It applies to a source with a ForgetMessages method
	// (checker.Checker); the outbox keeps its rows' bodies until its own
	// purge. At least Window. Negative: never cleared. Default the longer
	// of [DefaultKeepMessagesFor] (30 minutes) and Window: a `txmsgctl
	// reconcile` over an outage older than this finds those events unkept.
	KeepMessagesFor time.Duration
	// Hooks observe the reconciler's passes (txmsg.HookReconciled). A hook
	// that implements no hook interface is refused. Optional.
	Hooks txmsg.Hooks
}

// WithDefaults returns c with its zero fields set to their defaults. It
// checks nothing; see [ReconcilerConfig.Validate].
func (c ReconcilerConfig) WithDefaults() ReconcilerConfig {
	c.Conn = c.Conn.WithDefaults()
	if c.Name == "" {
		c.Name = "reconciler"
	}
	if c.DelayTopic == "" {
		c.DelayTopic = DefaultDelayTopic
	}
	setDefault(&c.Window, DefaultReconcileWindow)
	setDefault(&c.Interval, DefaultReconcileInterval)
	setDefault(&c.Concurrency, DefaultReconcileConcurrency)
	setDefault(&c.Batch, DefaultReconcileBatch)
	setDefault(&c.QueryTimeout, DefaultReconcileQueryTimeout)
	setDefault(&c.KeepMessagesFor, max(DefaultKeepMessagesFor, c.Window))
	return c
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate checks c, which WithDefaults has filled in. The error wraps
// [txmsg.ErrInvalidConfig] and names the field.
func (c ReconcilerConfig) Validate() error {
	const what = "reconciler"
	if err := c.Conn.validate(what); err != nil {
		return err
	}
	if err := validateHooks(what, c.Hooks); err != nil {
		return err
	}
	switch {
	case c.Window <= 0:
		return fmt.Errorf("%w: %s: Window %v must be positive (0 means %v)", txmsg.ErrInvalidConfig, what, c.Window, DefaultReconcileWindow)
	case c.Interval <= 0:
		return fmt.Errorf("%w: %s: Interval %v must be positive (0 means %v)", txmsg.ErrInvalidConfig, what, c.Interval, DefaultReconcileInterval)
	case c.Concurrency <= 0:
		return fmt.Errorf("%w: %s: Concurrency %d must be positive (0 means %d)", txmsg.ErrInvalidConfig, what, c.Concurrency, DefaultReconcileConcurrency)
	case c.Batch <= 0:
		return fmt.Errorf("%w: %s: Batch %d must be positive (0 means %d)", txmsg.ErrInvalidConfig, what, c.Batch, DefaultReconcileBatch)
	case c.QueryTimeout <= 0:
		return fmt.Errorf("%w: %s: QueryTimeout %v must be positive (0 means %v)", txmsg.ErrInvalidConfig, what, c.QueryTimeout, DefaultReconcileQueryTimeout)
	case c.KeepMessagesFor >= 0 && c.KeepMessagesFor < c.Window:
		return fmt.Errorf("%w: %s: KeepMessagesFor %v is shorter than Window %v: the reconciler would clear messages it may have to publish again (negative keeps them)", txmsg.ErrInvalidConfig, what, c.KeepMessagesFor, c.Window)
	}
	return nil
}

// ReconcileResult is what one pass of a [Reconciler] found.
type ReconcileResult struct {
	// Since and Until bound the window checked, on the source's clock.
	Since, Until time.Time
	// Checked counts the events looked up on the brokers.
	Checked int
	// Unkept counts committed events the source keeps no message of
	// (transactional mode without checker.Config.KeepMessages, or rows
	// written before it was on): they cannot be checked or published
	// again.
	Unkept int
	// Missing are the IDs of the events no broker of their topic had.
	Missing []string
	// Republished counts the missing events published again.
	Republished int
}

// Reconciler takes back the committed events a broker lost. It watches
// the cluster's broker groups, and when a group's master changes (its
// address moves, or the process at it restarted: its boot time changed,
// which covers a restart that lost the unflushed tail of its commit log),
// it checks the events committed within Window before the change against
// the brokers' message key index, and publishes again, with the same
// txmsg ID and keys, those no broker has. Consumers' inboxes drop the
// copies of events that were not lost after all. [Reconciler.Reconcile]
// runs the same check on a window of the caller's.
type Reconciler struct {
	src CommittedSource
	pub txmsg.Publisher
	cfg ReconcilerConfig
	log *slog.Logger

	mu      sync.Mutex // serialises passes
	forgot  time.Time  // the watcher cleared kept messages of rows before this
	cancel  context.CancelFunc
	done    chan struct{}
	startMu sync.Mutex
}

// NewReconciler returns a reconciler reading src and publishing through
// pub (which may be nil with DryRun). cfg goes through [ReconcilerConfig.WithDefaults] and
// [ReconcilerConfig.Validate]. It connects to nothing; call Start to watch
// the cluster, or call Reconcile.
func NewReconciler(src CommittedSource, pub txmsg.Publisher, cfg ReconcilerConfig) (*Reconciler, error) {
	if src == nil || (pub == nil && !cfg.DryRun) {
		return nil, fmt.Errorf("%w: reconciler: the source and the publisher are required", txmsg.ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "txmsg.reconciler", "reconciler", cfg.Name)
	hooks, err := driver.BindHooks(cfg.Hooks, log)
	if err != nil {
		return nil, fmt.Errorf("%w: reconciler: Hooks: %w", txmsg.ErrInvalidConfig, err)
	}
	cfg.Hooks = hooks
	return &Reconciler{src: src, pub: pub, cfg: cfg, log: log}, nil
}

// Start watches the cluster until Close: every Interval it reads the
// broker groups and their masters' runtime information, and reconciles
// the Window before each change it notices. The first reading is the
// baseline. Start is idempotent and returns at once.
func (r *Reconciler) Start(context.Context) error {
	r.startMu.Lock()
	defer r.startMu.Unlock()
	if r.done != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go r.watch(ctx)
	return nil
}

// Close stops watching and waits for a pass under way, or until ctx
// ends. It is idempotent.
func (r *Reconciler) Close(ctx context.Context) error {
	r.startMu.Lock()
	defer r.startMu.Unlock()
	if r.done == nil {
		return nil
	}
	r.cancel()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("reconciler: close: %w", ctx.Err())
	}
}

func (r *Reconciler) watch(ctx context.Context) {
	defer close(r.done)
	var prev ClusterSnapshot
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		cur, err := r.Snapshot(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("cannot read the cluster's brokers; trying again", "err", err, "retry_in", r.cfg.Interval)
		} else {
			changes := DetectChanges(prev, cur)
			prev = Merge(prev, cur)
			if len(changes) > 0 {
				r.log.Warn("a broker group's master changed; checking the events committed before it", "changes", fmt.Sprint(changes), "window", r.cfg.Window)
				r.afterChange(ctx)
			}
		}
		r.forget(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// forgetter is a CommittedSource that can clear the messages it keeps
// (checker.Checker).
type forgetter interface {
	ForgetMessages(ctx context.Context, from, before time.Time, batch int) (int64, error)
}

// forget clears the messages kept longer than KeepMessagesFor, from a
// little before where the last call stopped.
func (r *Reconciler) forget(ctx context.Context) {
	f, ok := r.src.(forgetter)
	if !ok || r.cfg.KeepMessagesFor < 0 {
		return
	}
	now, err := r.src.Now(ctx)
	if err != nil {
		return
	}
	before := now.Add(-r.cfg.KeepMessagesFor)
	from := time.Time{}
	if !r.forgot.IsZero() {
		from = r.forgot.Add(-time.Minute)
	}
	n, err := f.ForgetMessages(ctx, from, before, r.cfg.Batch)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("cannot clear the messages the barrier keeps; trying again", "err", err, "retry_in", r.cfg.Interval)
		}
		return
	}
	r.forgot = before
	if n > 0 {
		r.log.Debug("cleared kept messages", "rows", n, "older_than", r.cfg.KeepMessagesFor)
	}
}

// afterChange reconciles from Window before now, retrying until a pass
// goes through or ctx ends: a broker that just came back, or the name
// server, may not answer yet. Each try reaches up to the source's clock at
// that try, so a later change while it retries is covered too (its window
// starts after this one's).
func (r *Reconciler) afterChange(ctx context.Context) {
	var since time.Time
	for {
		now, err := r.src.Now(ctx)
		if err == nil {
			if since.IsZero() {
				since = now.Add(-r.cfg.Window)
			}
			if _, err = r.Reconcile(ctx, since, now.Add(r.cfg.Interval)); err == nil {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("reconciliation after a master change failed; trying again", "err", err, "retry_in", r.cfg.Interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.cfg.Interval):
		}
	}
}

// Reconcile checks the events committed in [since, until), on the
// source's clock, against the brokers of their topics, and publishes
// again those no broker has. It returns what it found; on an error it
// stops (what it found so far is in the result) and the window may be
// reconciled again: a second pass finds the events the first published
// again, once the brokers have indexed them. An event is missing when
// every broker group of its topic's route answered and none had it; a
// topic without a route, or a group that does not answer for an event no
// other group has, is an error. Reconcile calls the HookReconciled hooks.
func (r *Reconciler) Reconcile(ctx context.Context, since, until time.Time) (res ReconcileResult, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := time.Now()
	res.Since, res.Until = since, until
	defer func() {
		driver.Reconciled(r.cfg.Hooks, ctx, r.cfg.Name, res.Checked, len(res.Missing), res.Republished, err, time.Since(start))
		lvl := slog.LevelInfo
		if len(res.Missing) > 0 || err != nil {
			lvl = slog.LevelWarn
		}
		r.log.Log(ctx, lvl, "reconciled", "since", since, "until", until, "checked", res.Checked, "unkept", res.Unkept,
			"missing", len(res.Missing), "republished", res.Republished, "took", time.Since(start), "err", err)
	}()
	routes := map[string][]string{}
	conns := &connPool{tls: r.cfg.TLS, idle: map[string][]*rmqwire.Conn{}}
	defer conns.close()
	after := ""
	for {
		msgs, next, unkept, err := r.src.Committed(ctx, since, until, after, r.cfg.Batch)
		if err != nil {
			return res, fmt.Errorf("reconciler: %w", err)
		}
		res.Unkept += unkept
		missing, err := r.check(ctx, conns, msgs, routes, since)
		res.Checked += len(msgs)
		for _, m := range missing {
			res.Missing = append(res.Missing, m.ID)
		}
		if len(missing) > 0 && !r.cfg.DryRun {
			n, perr := r.republish(ctx, missing)
			res.Republished += n
			if perr != nil {
				return res, perr
			}
		}
		if err != nil {
			return res, err
		}
		if next == "" {
			return res, nil
		}
		after = next
	}
}

// check looks msgs up on the brokers and returns those none has. It
// returns the missing ones it found before an error too.
func (r *Reconciler) check(ctx context.Context, conns *connPool, msgs []*txmsg.Message, routes map[string][]string, since time.Time) ([]*txmsg.Message, error) {
	for _, m := range msgs {
		for _, topic := range r.topicsOf(m) {
			if _, ok := routes[topic]; ok {
				continue
			}
			addrs, err := r.readAddrs(ctx, topic)
			if err != nil {
				return nil, err
			}
			routes[topic] = addrs
		}
	}
	// The broker's index is searched by store time: from a margin before
	// the window (the producers', the database's and the brokers' clocks
	// differ) to well after now.
	from, to := since.Add(-r.cfg.Window), time.Now().Add(time.Hour)
	found := make([]bool, len(msgs))
	errs := make([]error, len(msgs))
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, topic := range r.topicsOf(m) {
				if found[i], errs[i] = r.present(ctx, conns, topic, routes[topic], m, from, to); found[i] || errs[i] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	var missing []*txmsg.Message
	for i, m := range msgs {
		if errs[i] != nil {
			return missing, errs[i]
		}
		if !found[i] {
			missing = append(missing, m)
		}
	}
	return missing, nil
}

// topicsOf returns the topics m may be found in: its own and, for a
// delayed message, the delay topic it waits in until it is due.
func (r *Reconciler) topicsOf(m *txmsg.Message) []string {
	if m.DeliverAt.IsZero() || m.Topic == r.cfg.DelayTopic {
		return []string{m.Topic}
	}
	return []string{m.Topic, r.cfg.DelayTopic}
}

// present reports whether a broker of addrs has m in topic, by its txmsg
// ID in the key index. Every broker must answer for "no".
func (r *Reconciler) present(ctx context.Context, conns *connPool, name string, addrs []string, m *txmsg.Message, from, to time.Time) (bool, error) {
	var errs []error
	topic := r.cfg.brokerTopic(name)
	for _, addr := range addrs {
		qctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		body, ok, err := conns.queryByKey(qctx, addr, topic, m.ID, from, to)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		if !ok {
			continue
		}
		for _, ext := range primitive.DecodeMessage(body) {
			// The index matches by hash: compare the ID.
			if ext.GetProperty(txmsg.PropertyID) == m.ID {
				return true, nil
			}
		}
	}
	if len(errs) > 0 {
		return false, fmt.Errorf("reconciler: look %s up in %s: %w", m.ID, name, errors.Join(errs...))
	}
	return false, nil
}

// connPool keeps the connections of one pass to the brokers, so that
// each lookup costs a round trip, not a connect as well. Connections are
// closed at the end of the pass.
type connPool struct {
	tls  bool
	mu   sync.Mutex
	idle map[string][]*rmqwire.Conn
}

// queryByKey looks key up on the broker at addr over an idle connection,
// or a new one.
func (p *connPool) queryByKey(ctx context.Context, addr, topic, key string, from, to time.Time) ([]byte, bool, error) {
	p.mu.Lock()
	var c *rmqwire.Conn
	if n := len(p.idle[addr]); n > 0 {
		c, p.idle[addr] = p.idle[addr][n-1], p.idle[addr][:n-1]
	}
	p.mu.Unlock()
	if c == nil {
		var err error
		if c, err = rmqwire.Dial(ctx, addr, p.tls); err != nil {
			return nil, false, err
		}
	}
	body, ok, err := c.QueryByKey(ctx, topic, key, 32, from, to)
	if err != nil {
		_ = c.Close()
		return nil, false, err
	}
	p.mu.Lock()
	p.idle[addr] = append(p.idle[addr], c)
	p.mu.Unlock()
	return body, ok, nil
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cs := range p.idle {
		for _, c := range cs {
			_ = c.Close()
		}
	}
	p.idle = nil
}

// republish publishes msgs again and returns how many went through.
func (r *Reconciler) republish(ctx context.Context, msgs []*txmsg.Message) (int, error) {
	for _, m := range msgs {
		r.log.Warn("committed event missing from the brokers; publishing it again", "txmsg_id", m.ID, "topic", m.Topic)
	}
	// A delayed event not yet due goes back to the delay topic, one at a
	// time; the others go to their topics in one call.
	var now []*txmsg.Message
	sent := 0
	for _, m := range msgs {
		if !m.DeliverAt.After(time.Now()) {
			now = append(now, m)
			continue
		}
		if err := sendAgain(ctx, r.pub, r.cfg.DelayTopic, m); err != nil {
			return sent, fmt.Errorf("reconciler: publish delayed event %s again: %w", m.ID, err)
		}
		sent++
	}
	if len(now) == 0 {
		return sent, nil
	}
	msgs = now
	err := r.pub.Publish(ctx, msgs...)
	if err == nil {
		return sent + len(msgs), nil
	}
	var be *txmsg.BatchError
	if errors.As(err, &be) {
		n := 0
		for _, e := range be.Errs {
			if e == nil {
				n++
			}
		}
		return sent + n, fmt.Errorf("reconciler: publish %d missing events again: %w", len(msgs)-n, err)
	}
	return sent, fmt.Errorf("reconciler: publish %d missing events again: %w", len(msgs), err)
}

// readAddrs returns the address to query of each broker group serving
// topic: its master, or a slave while it has none.
func (r *Reconciler) readAddrs(ctx context.Context, topic string) ([]string, error) {
	var lastErr error
	for _, ns := range r.cfg.NameServers {
		qctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		rd, err := rmqwire.TopicRoute(qctx, nameServerAddr(ns), r.cfg.TLS, r.cfg.brokerTopic(topic))
		cancel()
		if errors.Is(err, rmqwire.ErrTopicNotExist) {
			return nil, fmt.Errorf("reconciler: %w", err)
		}
		if err != nil {
			lastErr = err
			continue
		}
		var addrs []string
		for _, bd := range rd.BrokerDatas {
			if a := readAddr(bd.BrokerAddrs); a != "" {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("reconciler: the route of %s lists no broker", topic)
		}
		return addrs, nil
	}
	return nil, fmt.Errorf("reconciler: route of %s: %w", topic, lastErr)
}

// readAddr is the master's address, or the slave's with the lowest ID.
func readAddr(addrs map[string]string) string {
	if a := addrs["0"]; a != "" {
		return a
	}
	best, bestID := "", int64(-1)
	for id, a := range addrs {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || a == "" {
			continue
		}
		if bestID < 0 || n < bestID {
			best, bestID = a, n
		}
	}
	return best
}

// BrokerState is what a [ClusterSnapshot] records of one broker group.
type BrokerState struct {
	// Master is the master's address ("" when the group has none).
	Master string
	// Boot is the master process's start, in Unix milliseconds, from its
	// runtime information; 0 when it did not answer.
	Boot int64
	// MaxOffset is the master's commit log end offset.
	MaxOffset int64
}

// ClusterSnapshot is one reading of the cluster: each broker group's
// state, by broker name.
type ClusterSnapshot map[string]BrokerState

// Change is one broker group's change between two snapshots.
type Change struct {
	Broker   string
	Was, Now BrokerState
	// Why says what changed: "master moved", "master restarted" or
	// "commit log shrank".
	Why string
}

// String describes the change.
func (c Change) String() string {
	return fmt.Sprintf("%s: %s (%s boot %d offset %d → %s boot %d offset %d)", c.Broker, c.Why,
		c.Was.Master, c.Was.Boot, c.Was.MaxOffset, c.Now.Master, c.Now.Boot, c.Now.MaxOffset)
}

// DetectChanges compares known, the last known state of each broker group
// (see [Merge]), with cur, a new reading, and returns the groups whose
// master changed in a way that may have lost acknowledged messages: a
// master at another address, a master whose process restarted (another
// boot time), or a commit log that ends before it did. A group without a
// master in cur, or whose master did not answer (Boot 0), is not judged
// until it has one that answers; a group first seen is the baseline.
func DetectChanges(known, cur ClusterSnapshot) []Change {
	var out []Change
	for name, now := range cur {
		was, ok := known[name]
		if !ok || was.Master == "" || now.Master == "" || now.Boot == 0 {
			continue
		}
		c := Change{Broker: name, Was: was, Now: now}
		switch {
		case now.Master != was.Master:
			c.Why = "master moved"
		case was.Boot != 0 && now.Boot != was.Boot:
			c.Why = "master restarted"
		case now.MaxOffset < was.MaxOffset:
			c.Why = "commit log shrank"
		default:
			continue
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Broker < out[j].Broker })
	return out
}

// Merge returns known updated with cur: a group's state is replaced only
// by a reading that has a master that answered, so a master that goes
// away and comes back is compared with the one before it left.
func Merge(known, cur ClusterSnapshot) ClusterSnapshot {
	out := make(ClusterSnapshot, len(known)+len(cur))
	for name, s := range known {
		out[name] = s
	}
	for name, s := range cur {
		if _, ok := out[name]; !ok || (s.Master != "" && s.Boot != 0) {
			out[name] = s
		}
	}
	return out
}

// Snapshot reads the cluster: the broker groups from the first name
// server that answers, and each master's runtime information.
func (r *Reconciler) Snapshot(ctx context.Context) (ClusterSnapshot, error) {
	var ci *rmqwire.ClusterInfo
	var lastErr error
	for _, ns := range r.cfg.NameServers {
		qctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		c, err := rmqwire.Cluster(qctx, nameServerAddr(ns), r.cfg.TLS)
		cancel()
		if err == nil {
			ci = c
			break
		}
		lastErr = err
	}
	if ci == nil {
		return nil, fmt.Errorf("reconciler: %w", lastErr)
	}
	out := ClusterSnapshot{}
	for name, bd := range ci.BrokerAddrTable {
		s := BrokerState{Master: bd.Master()}
		if s.Master != "" {
			qctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
			info, err := rmqwire.RuntimeInfo(qctx, s.Master, r.cfg.TLS)
			cancel()
			if err == nil {
				s.Boot, _ = strconv.ParseInt(info["bootTimestamp"], 10, 64)
				s.MaxOffset, _ = rmqwire.CommitLogMaxOffset(info)
			}
		}
		out[name] = s
	}
	return out, nil
}

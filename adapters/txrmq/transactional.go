package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/heartbeat"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// TransactionalConfig configures a [Transactional] producer.
type TransactionalConfig struct {
	Conn
	// Group is the producer group. Required. All producers of a
	// transactional group must answer check-backs from the same database.
	Group string
	// SendTimeout bounds one send to the broker. Default
	// [DefaultSendTimeout] (3 s).
	SendTimeout time.Duration
	// Retries is how many times the client retries a failed plain send.
	// Default [DefaultRetries] (2).
	Retries int
	// MaxBodySize is the largest body accepted; it should equal the
	// broker's maxMessageSize. Default [txmsg.DefaultMaxBodySize] (4 MiB).
	MaxBodySize int
	// Hooks observe the producer's events (see txmsg.Hook): BeforeSend,
	// OnInvalidSend, OnHalfSent, OnLocalDone and OnCheckBack. A hook that
	// implements no hook interface is refused. Optional.
	Hooks txmsg.Hooks
	// Topics are the topics this producer sends to. Start fetches their
	// routes and introduces the producer to their brokers, so a restarted
	// service answers check-backs before its first send. Optional but
	// recommended.
	Topics []string
	// CheckBackWorkers is how many check-backs are resolved from the
	// barrier at once. Default [DefaultCheckBackWorkers].
	CheckBackWorkers int
	// CheckBackQueue is how many check-backs may wait for a worker. One
	// that finds the queue full, while the database is slow, is answered
	// UNKNOWN at once and the broker asks again later, so check-backs never
	// pile up in memory. Default [DefaultCheckBackQueue].
	CheckBackQueue int
	// CheckBackCacheSize bounds the outcome cache: how many of this
	// producer's latest transactions it remembers the outcome of, to
	// answer their check-backs without the database (while it is down,
	// too). Default [DefaultCheckBackCacheSize]; negative turns the cache
	// off, and every check-back reads the barrier. An entry takes about
	// 160 bytes with a UUIDv7 ID (16 MB at the default size). See
	// [Transactional] for what the cache answers.
	CheckBackCacheSize int
	// DelayTopic is where the half messages of delayed messages
	// (txmsg.WithDelay) go, since the broker does not delay half
	// messages; a [Forwarder] consuming it sends them on when due.
	// Default [DefaultDelayTopic]. Create the topic before sending
	// delayed messages.
	DelayTopic string
	// CheckBackCacheAge is how long an outcome stays in the cache.
	// Default [DefaultCheckBackCacheAge] (5 minutes), or the checker's
	// CheckWindow when that is shorter; it may not exceed the checker's
	// CheckWindow (the broker asks nothing after its check window).
	// Negative turns the cache off. Zero is left as it is by WithDefaults
	// and resolved by NewTransactional, which knows the checker.
	CheckBackCacheAge time.Duration
	// Heartbeat is the producer's row in the instance table, written from
	// Start to Close on the producer's database: its Health and its counts
	// (committed sends, failures, check-back answers; see package fleet).
	// Optional: the zero value writes every 10 s into txmsg_instances.
	Heartbeat fleet.Config
}

// WithDefaults returns c with its zero fields set to their defaults
// (CheckBackCacheAge excepted; see there). It checks nothing.
func (c TransactionalConfig) WithDefaults() TransactionalConfig {
	c.Conn = c.Conn.WithDefaults()
	c.SendTimeout, c.Retries, c.MaxBodySize = sendDefaults(c.SendTimeout, c.Retries, c.MaxBodySize)
	c.CheckBackWorkers, c.CheckBackQueue = checkBackDefaults(c.CheckBackWorkers, c.CheckBackQueue)
	if c.CheckBackCacheSize == 0 {
		c.CheckBackCacheSize = DefaultCheckBackCacheSize
	}
	c.Heartbeat = c.Heartbeat.WithDefaults()
	if c.DelayTopic == "" {
		c.DelayTopic = DefaultDelayTopic
	}
	return c
}

// Validate checks c, which WithDefaults has filled in. The error wraps
// [txmsg.ErrInvalidConfig] and names the field.
func (c TransactionalConfig) Validate() error {
	const what = "transactional producer"
	if err := validateClient(what, &c.Conn, c.Group); err != nil {
		return err
	}
	if err := validateProducer(what, c.SendTimeout, c.Retries, c.MaxBodySize, c.Hooks, c.Topics); err != nil {
		return err
	}
	if err := txmsg.ValidateTopic(c.DelayTopic); err != nil {
		return fmt.Errorf("%w: %s: DelayTopic: %w", txmsg.ErrInvalidConfig, what, err)
	}
	if err := validateCheckBackLimits(what, c.CheckBackWorkers, c.CheckBackQueue); err != nil {
		return err
	}
	return c.Heartbeat.ValidateIn(what)
}

// producer is what the client's producer options need of c.
func (c *TransactionalConfig) producer() producerSetup {
	return producerSetup{conn: &c.Conn, group: c.Group, sendTimeout: c.SendTimeout, retries: c.Retries}
}

// cache resolves the outcome cache's settings against the checker's
// check window; size 0 means the cache is off.
func (c *TransactionalConfig) cache(window time.Duration) (int, time.Duration, error) {
	if c.CheckBackCacheSize < 0 || c.CheckBackCacheAge < 0 {
		return 0, 0, nil
	}
	size, age := c.CheckBackCacheSize, c.CheckBackCacheAge
	if size == 0 {
		size = DefaultCheckBackCacheSize
	}
	if age == 0 {
		age = min(DefaultCheckBackCacheAge, window)
	}
	if age > window {
		return 0, 0, fmt.Errorf("%w: transactional producer: CheckBackCacheAge %s exceeds the checker's CheckWindow %s; "+
			"the broker asks nothing after its check window", txmsg.ErrInvalidConfig, age, window)
	}
	return size, age, nil
}

// Transactional is the transactional-mode [txmsg.Transactor]: it sends a
// half message, runs the local transaction with a barrier row, then commits
// or rolls the message back. The broker's check-backs are answered by the
// [checker.Checker] from the barrier table, or, for a transaction this
// producer ran, from its outcome cache.
//
// The outcome cache: when a local transaction's outcome is definite (its
// COMMIT succeeded, or it rolled back: the local function failed or
// panicked, or the barrier insert failed), the Transactional remembers it
// for the half message that transaction belongs to. A check-back for that
// very half message is answered COMMIT or ROLLBACK from memory, at once
// and whether or not the database is reachable. An outcome is never
// remembered when COMMIT's result was lost ([txmsg.ErrOutcomeUnknown]),
// and nothing else is answered from memory: a check-back for a
// transaction still running here answers UNKNOWN first, and one for any
// other half message, including an earlier or later one that reused the
// same ID, reads the barrier, which writes the fencing rolled_back row for
// an ID it has never seen. Sized by [TransactionalConfig.CheckBackCacheSize]
// and CheckBackCacheAge.
type Transactional struct {
	cfg  TransactionalConfig
	db   *gorm.DB
	chk  *checker.Checker
	log  *slog.Logger
	prod rmq.TransactionProducer
	rc   *reconnector
	// beat writes the instance's row from Start to Close; counts are its
	// counters, fed as a hook.
	beat   *heartbeat.Beat
	counts *heartbeat.Counters

	calls sync.Map // txmsg ID → *call
	cb    *checkBacks
	// outcomes is the outcome cache; nil when it is off.
	outcomes *outcomeCache

	mu      sync.RWMutex
	started bool
	closed  bool
	wg      sync.WaitGroup
}

var _ txmsg.Transactor = (*Transactional)(nil)

// call is one Transact in flight: the listener finds it by txmsg ID.
type call struct {
	ctx   context.Context
	msg   *txmsg.Message
	start time.Time
	local txmsg.LocalTx
	id    string
	// half is the half message's unique key (UNIQ_KEY), which the broker
	// sends back with its check-backs.
	half string
	ran  bool
	// holding is set once this process's local transaction holds the
	// barrier row, and stays set until Transact returns, after its own
	// END_TRANSACTION was sent.
	holding atomic.Bool
	state   txmsg.LocalState
	err     error
}

// sameDatabaseTimeout bounds NewTransactional's check that db and the
// checker reach one database.
const sameDatabaseTimeout = 10 * time.Second

// NewTransactional builds a transactional producer whose local
// transactions run on db and whose check-backs chk answers, after filling
// cfg's defaults and validating it (see [TransactionalConfig.WithDefaults]
// and [TransactionalConfig.Validate]). Call Start before Transact.
//
// db and the checker's handle must reach the same database: the local
// transaction writes the barrier row the checker reads. NewTransactional
// asks both (SELECT DATABASE(), @@hostname, @@port) and refuses a mismatch
// with an error matching [txmsg.ErrInvalidConfig] and
// [checker.ErrOtherDatabase]; it fails too when the database cannot be
// reached within 10 s.
func NewTransactional(db *gorm.DB, chk *checker.Checker, cfg TransactionalConfig) (*Transactional, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil || chk == nil {
		return nil, fmt.Errorf("%w: transactional producer: db and checker are required", txmsg.ErrInvalidConfig)
	}
	hooks, err := driver.BindHooks(cfg.Hooks, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("transactional producer: %w", err)
	}
	counts := &heartbeat.Counters{}
	cfg.Hooks = append(hooks, counts)
	cacheSize, cacheAge, err := cfg.cache(chk.CheckWindow())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), sameDatabaseTimeout)
	err = chk.CheckSameDatabase(ctx, db)
	cancel()
	switch {
	case errors.Is(err, checker.ErrOtherDatabase):
		return nil, fmt.Errorf("%w: transactional producer: %w", txmsg.ErrInvalidConfig, err)
	case err != nil:
		return nil, fmt.Errorf("rocketmq: transactional producer: %w", err)
	}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	t := &Transactional{cfg: cfg, db: db, chk: chk, log: cfg.Logger.With("component", "txmsg.transactional", "group", cfg.Group),
		outcomes: newOutcomeCache(cacheSize, cacheAge), counts: counts}
	limits := checkBackLimits{workers: cfg.CheckBackWorkers, queue: cfg.CheckBackQueue}
	t.cb = newCheckBacks(t.log, cfg.Hooks, cfg.Group, limits, t.resolve)
	prod, err := newCheckBackProducer(cfg.producer(), "tx", t.cb, listener{t})
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new transactional producer: %w", err)
	}
	t.prod = prod
	return t, nil
}

// Start starts the producer and, for the configured topics, fetches routes
// and sends a heartbeat to their brokers, so check-backs reach this
// instance at once. A topic without a route yet is logged, not fatal: the
// broker may create it on first send.
//
// Start first asks the name servers, each within
// Conn.NameServerTimeout. When none answers, Start logs a warning that
// names each name server and its error, and starts without fetching
// routes: sends fail with txmsg.ErrUnavailable until a name server
// answers. When ctx ends first, Start returns its error and does not
// start.
func (t *Transactional) Start(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return txmsg.ErrClosed
	}
	if t.started {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	answered, err := askProducerNameServers(ctx, &t.cfg.Conn, t.cfg.Topics, t.log)
	if err != nil {
		return fmt.Errorf("rocketmq: start transactional producer of group %q: %w", t.cfg.Group, err)
	}
	t.cb.start()
	if err := t.prod.Start(); err != nil {
		return fmt.Errorf("rocketmq: start transactional producer: %w", err)
	}
	t.started = true
	if len(t.cfg.Topics) > 0 && answered {
		if err := clientinternals.WarmTransactionProducer(t.prod, t.cfg.Topics); err != nil {
			t.log.Warn("cannot pre-fetch topic routes; check-backs reach this instance after its first send", "err", err)
		}
	}
	t.rc = t.newReconnector()
	t.rc.start()
	t.beat = heartbeat.Start(t.db, t.cfg.Heartbeat, fleet.KindProducer, t.cfg.Group, t.Health, t.counts, t.log)
	return nil
}

func (t *Transactional) enter() error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return txmsg.ErrClosed
	}
	if !t.started {
		return fmt.Errorf("rocketmq: transactional producer of group %q: %w; call Start first", t.cfg.Group, txmsg.ErrNotStarted)
	}
	t.wg.Add(1)
	return nil
}

// Transact implements [txmsg.Transactor]. The sequence: validate; send the
// half message (if that fails, local never runs); run one database
// transaction that inserts the barrier row first and then runs local;
// commit or roll back the half message accordingly.
//
// Errors: validation errors wrap txmsg.ErrInvalidMessage; a failed half
// send is returned as is, wrapped; local's error (or a *txmsg.PanicError)
// is returned wrapped, with a Receipt in StateRolledBack;
// txmsg.ErrRolledBackByCheck when a check-back decided first;
// txmsg.ErrOutcomeUnknown when COMMIT's result was lost, or when the ID's
// barrier row already existed and could not be read (this local
// transaction rolled back; an earlier one with the ID may have committed).
//
// A delayed message (txmsg.WithDelay, txmsg.WithDeliverAt) goes the same
// way, but its half message is sent to DelayTopic with its topic and due
// time; once committed, a [Forwarder] sends it on when due. A delay that
// is not valid at the start fails with txmsg.ErrInvalidMessage before
// anything is sent.
//
// The local transaction is a new one on the producer's db, never one the
// caller holds: do not call Transact inside an open gorm transaction (see
// the txmsg package documentation).
func (t *Transactional) Transact(ctx context.Context, msg *txmsg.Message, local txmsg.LocalTx) (*txmsg.Receipt, error) {
	if local == nil {
		return nil, txmsg.ErrNilLocalTx
	}
	if msg != nil {
		driver.BeforeSend(t.cfg.Hooks, ctx, msg)
	}
	if err := msg.Validate(t.cfg.MaxBodySize); err != nil {
		driver.InvalidSend(t.cfg.Hooks, ctx, msg, err)
		return nil, err
	}
	due, delayed, err := msg.Due(time.Now())
	if err != nil {
		driver.InvalidSend(t.cfg.Hooks, ctx, msg, err)
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rocketmq: transact: %w", err)
	}
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.wg.Done()
	if msg.ID == "" {
		msg.ID = txmsg.NewID()
	}
	c := &call{ctx: ctx, msg: msg, start: time.Now(), local: local, id: msg.ID}
	if _, dup := t.calls.LoadOrStore(msg.ID, c); dup {
		return nil, fmt.Errorf("%w: %s is already in flight", txmsg.ErrDuplicateID, msg.ID)
	}
	defer t.calls.Delete(msg.ID)

	half := toPrimitive(msg)
	if delayed {
		// The broker applies a delay or timer property of a half message
		// to the half message itself, which then loses its topic
		// (docs/design.md, "Delayed messages"): the half message goes to
		// the delay topic instead, with its topic (PropertyTopic) and due
		// time, and the Forwarder sends it on.
		half.Topic = t.cfg.DelayTopic
		half.WithProperty(txmsg.PropertyDeliverAt, txmsg.FormatDeliverAt(due))
	}
	res, err := t.prod.SendMessageInTransaction(ctx, half)
	if err != nil {
		t.rc.kick()
		driver.HalfSent(t.cfg.Hooks, ctx, msg, err, time.Since(c.start))
		return nil, fmt.Errorf("rocketmq: send half message to %s: %w", half.Topic, err)
	}
	receipt := &txmsg.Receipt{ID: msg.ID, State: c.state}
	if res.SendResult != nil {
		receipt.BrokerMessageID = res.MsgID
	}
	if !c.ran {
		// The broker did not store the half message as asked
		// (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT: a SYNC_MASTER whose
		// slave did not acknowledge in time, SLAVE_NOT_AVAILABLE); the
		// client rolled it back, so nothing of this transaction is
		// anywhere. The broker is degraded, not the message: ErrUnavailable,
		// and a retry may reach another broker (a message without a
		// sharding key goes to the next queue).
		status := "no result"
		if res.SendResult != nil {
			status = sendStatusName(res.Status)
		}
		receipt.State = txmsg.StateRolledBack
		err := fmt.Errorf("%w: rocketmq: half message to %s not stored as asked (%s); the client rolled it back and the local transaction did not run: retry",
			txmsg.ErrUnavailable, msg.Topic, status)
		driver.HalfSent(t.cfg.Hooks, ctx, msg, err, time.Since(c.start))
		return receipt, err
	}
	return receipt, c.err
}

// runLocal runs the barrier insert and the caller's work in one database
// transaction. It is called from the client's ExecuteLocalTransaction.
func (t *Transactional) runLocal(c *call) {
	c.ran = true
	driver.HalfSent(t.cfg.Hooks, c.ctx, c.msg, nil, time.Since(c.start))
	localStart := time.Now()
	defer func() {
		// A definite outcome is remembered for check-backs of this half
		// message; an unknown one drops whatever an earlier use of the ID
		// left, so the barrier decides.
		t.outcomes.record(c.id, c.half, c.state)
		took := time.Since(localStart)
		if t.log.Enabled(c.ctx, slog.LevelDebug) {
			t.log.Debug("local transaction done", "txmsg_id", c.id, "topic", c.msg.Topic, "state", c.state.String(), "took", took, "err", c.err)
		}
		driver.LocalDone(t.cfg.Hooks, c.ctx, c.msg, c.state, c.err, took)
	}()
	tx := t.db.WithContext(c.ctx).Begin()
	if tx.Error != nil {
		c.state, c.err = txmsg.StateRolledBack, fmt.Errorf("rocketmq: begin local transaction: %w", tx.Error)
		return
	}
	if err := t.chk.BeginMessage(c.ctx, tx, c.msg); err != nil {
		tx.Rollback()
		c.state, c.err = txmsg.StateRolledBack, err
		return
	}
	c.holding.Store(true)
	if err := driver.CallLocal(c.ctx, tx, c.local); err != nil {
		tx.Rollback()
		c.state, c.err = txmsg.StateRolledBack, err
		return
	}
	if err := tx.Commit().Error; err != nil {
		// COMMIT may or may not have landed. Answer UNKNOWN; the check-back
		// reads the barrier, which knows.
		c.state, c.err = txmsg.StateUnknown, fmt.Errorf("%w: %w", txmsg.ErrOutcomeUnknown, err)
		return
	}
	c.state = txmsg.StateCommitted
}

// resolve answers one check-back: UNKNOWN for a transaction still running
// here, from the outcome cache for a half message whose local transaction
// ended here, otherwise from the barrier table.
func (t *Transactional) resolve(ctx context.Context, ext *primitive.MessageExt) primitive.LocalTransactionState {
	id := ext.GetProperty(txmsg.PropertyID)
	if t.runningHere(id, ext.Topic) {
		return primitive.UnkonwnState
	}
	if state, ok := t.fromCache(id, halfKey(ext), ext.Topic); ok {
		return toPrimitiveState(state)
	}
	return resolveFromBarrier(ctx, t.chk, t.log, t.cfg.Hooks, t.cfg.Group, ext)
}

// runningHere reports, and tells the hooks, that id's local transaction
// runs, or has just ended, in this process, which sends its own
// END_TRANSACTION. Waiting on its barrier row would hold a worker, and a
// COMMIT answered here as well would make the broker deliver the message
// twice.
func (t *Transactional) runningHere(id, topic string) bool {
	v, ok := t.calls.Load(id)
	if !ok || id == "" || !v.(*call).holding.Load() {
		return false
	}
	t.log.Debug("check-back for a transaction still running here; answering UNKNOWN", "txmsg_id", id)
	driver.CheckBack(t.cfg.Hooks, t.cfg.Group, id, topic, txmsg.StateUnknown, nil, 0)
	return true
}

// fromCache answers from the outcome cache, and tells the hooks, when it
// holds the outcome of half's local transaction.
func (t *Transactional) fromCache(id, half, topic string) (txmsg.LocalState, bool) {
	if t.outcomes == nil || id == "" {
		return txmsg.StateUnknown, false
	}
	start := time.Now()
	state, ok := t.outcomes.lookup(id, half)
	if !ok {
		return txmsg.StateUnknown, false
	}
	driver.CheckBack(t.cfg.Hooks, t.cfg.Group, id, topic, state, nil, time.Since(start))
	if t.log.Enabled(context.Background(), slog.LevelDebug) {
		t.log.Debug("check-back answered from the outcome cache", "txmsg_id", id, "topic", topic, "state", state.String())
	}
	return state, true
}

// halfKey is the unique key of the half message a check-back is about.
func halfKey(ext *primitive.MessageExt) string {
	if k := ext.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex); k != "" {
		return k
	}
	return ext.TransactionId
}

// ResolveCheckBack answers a check-back for the half message with txmsg
// ID txID and broker message ID brokerMessageID ([txmsg.Receipt]'s
// BrokerMessageID) the way this producer answers the broker's: UNKNOWN
// with a nil error while the transaction is still running in this process;
// from the outcome cache when it holds that half message's outcome;
// otherwise from the barrier through [checker.Checker.Resolve], which, for
// an ID the barrier has never seen, writes the rolled_back row that keeps
// the ID from ever committing. The answer goes to the CheckBack hooks.
// Nothing is sent to the broker.
//
// The broker's check-backs need no call: Start answers them. This is for
// tools and benchmarks that measure or inspect the answer path.
func (t *Transactional) ResolveCheckBack(ctx context.Context, txID, brokerMessageID string) (txmsg.LocalState, error) {
	if txID == "" {
		return txmsg.StateUnknown, errors.New("rocketmq: resolve check-back: empty txmsg ID")
	}
	if t.runningHere(txID, "") {
		return txmsg.StateUnknown, nil
	}
	if state, ok := t.fromCache(txID, brokerMessageID, ""); ok {
		return state, nil
	}
	start := time.Now()
	state, err := t.chk.Resolve(ctx, txID)
	driver.CheckBack(t.cfg.Hooks, t.cfg.Group, txID, "", state, err, time.Since(start))
	return state, err
}

// CheckBackCacheStats describes a Transactional's outcome cache.
type CheckBackCacheStats struct {
	// Entries is how many transactions' outcomes the cache holds.
	Entries int
	// Hits counts check-backs answered from the cache; Misses those it
	// could not answer, which went to the barrier. Both count since
	// NewTransactional. The CheckBack hooks see both kinds alike: a hit
	// reaches them with a nil error and the lookup's time, well under a
	// millisecond.
	Hits, Misses int64
	// Evicted counts outcomes dropped for size or age.
	Evicted int64
}

// CheckBackCacheStats returns the outcome cache's figures; all zero when
// the cache is off.
func (t *Transactional) CheckBackCacheStats() CheckBackCacheStats {
	c := t.outcomes
	if c == nil {
		return CheckBackCacheStats{}
	}
	return CheckBackCacheStats{Entries: c.len(), Hits: c.hits.Load(), Misses: c.misses.Load(), Evicted: c.evicted.Load()}
}

func toPrimitiveState(s txmsg.LocalState) primitive.LocalTransactionState {
	switch s {
	case txmsg.StateCommitted:
		return primitive.CommitMessageState
	case txmsg.StateRolledBack:
		return primitive.RollbackMessageState
	default:
		return primitive.UnkonwnState
	}
}

// Close stops new sends, waits for those under way (or for ctx), then
// shuts the producer down and ends every goroutine it started, the
// client's check-back reader included. Check-backs for this group keep
// being answered by the group's other live producers.
func (t *Transactional) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	started := t.started
	t.mu.Unlock()
	t.beat.Stop(ctx)
	t.cb.beginClose()
	defer t.cb.finish()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("rocketmq: transactional producer close: %w", ctx.Err())
	}
	t.cb.stopWorkers()
	if started {
		t.rc.close()
		if serr := t.prod.Shutdown(); serr != nil && err == nil {
			err = fmt.Errorf("rocketmq: transactional producer shutdown: %w", serr)
		}
	}
	return err
}

// listener adapts the client's callbacks. Both recover panics: a panic in
// the client's check-back goroutine would stop all later check-backs of the
// process.
type listener struct{ t *Transactional }

func (l listener) ExecuteLocalTransaction(m *primitive.Message) (state primitive.LocalTransactionState) {
	id := m.GetProperty(txmsg.PropertyID)
	v, ok := l.t.calls.Load(id)
	if !ok {
		// Not ours to decide; the check-back will read the barrier.
		return primitive.UnkonwnState
	}
	c := v.(*call)
	c.half = m.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)
	defer func() {
		if r := recover(); r != nil {
			c.state, c.err = txmsg.StateUnknown, &txmsg.PanicError{Value: r, Stack: debug.Stack()}
			state = primitive.UnkonwnState
		}
	}()
	l.t.runLocal(c)
	return toPrimitiveState(c.state)
}

func (l listener) CheckLocalTransaction(ext *primitive.MessageExt) primitive.LocalTransactionState {
	return l.t.cb.check(ext)
}

var _ primitive.TransactionListener = listener{}

// newReconnector watches the brokers of cfg.Topics (none without Topics:
// then only failed sends refresh at once). The heartbeat matters most
// here: a restarted broker sends check-backs only to producers that have
// sent it one.
func (t *Transactional) newReconnector() *reconnector {
	rp, err := clientinternals.TransactionProducerNameServers(t.prod)
	if err != nil {
		t.log.Warn("cannot watch brokers; after a broker restart the client recovers on its 30 s timers", "err", err)
		return nil
	}
	refresh, err := clientinternals.TransactionProducerRefresher(t.prod)
	if err != nil {
		t.log.Warn("cannot watch brokers; after a broker restart the client recovers on its 30 s timers", "err", err)
		return nil
	}
	topics := make([]string, 0, len(t.cfg.Topics))
	for _, topic := range t.cfg.Topics {
		topics = append(topics, t.cfg.brokerTopic(topic))
	}
	return newReconnector(t.log, topics, rp, refresh).askingMasters(&t.cfg.Conn)
}

// sendStatusName names a send status as the broker's response codes do.
func sendStatusName(s primitive.SendStatus) string {
	switch s {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	default:
		return fmt.Sprintf("status %d", s)
	}
}

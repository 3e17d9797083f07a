package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/txmsg"
)

// ErrNoProducer means Transact was called on a stack that does not run
// [PartProducer].
var ErrNoProducer = errors.New("stack: this stack does not run PartProducer")

// Stack is one delivery mode's components, run as one. It is a
// [txmsg.Transactor]. Build it with [Transactional] or [Outbox]. It is safe
// for concurrent use.
type Stack struct {
	mode  string
	parts Part
	db    *gorm.DB
	log   *slog.Logger

	tr      txmsg.Transactor // nil without PartProducer
	chk     *checker.Checker
	txp     *txrmq.Transactional
	sweeper *txrmq.Sweeper
	// forwarder sends delayed transactional messages on when due.
	forwarder *txrmq.Forwarder
	pub       *txrmq.Publisher
	ob        *outbox.Outbox
	relays    []*outbox.Relay
	barrier   *checker.Checker // local-table mode: OutboxConfig.Publisher.Checker
	rec       *txrmq.Reconciler

	// instances is the instance table (Config.Heartbeat.Table).
	instances string

	// sweeperGroup is the sweeper's group, "" without one.
	sweeperGroup string

	// components in start order.
	components []component

	state atomic.Int32 // stateNew, stateStarted, stateClosed
	mu    sync.Mutex   // serialises Start and Close

	stopRelays context.CancelFunc
	relaysDone chan struct{}
}

const (
	stateNew int32 = iota
	stateStarted
	stateClosed
)

// component is one part's start and close.
type component struct {
	name  string
	start func(context.Context) error
	close func(context.Context) error
}

var _ txmsg.Transactor = (*Stack)(nil)

// Transactional builds a transactional-mode stack on db, the service's
// database, where the stack's tables live and the local transactions run
// (its MySQL DSN needs parseTime=true): a [checker.Checker] on db, a
// [txrmq.Transactional] producer in group cfg.Group (with
// [PartProducer]), and a [txrmq.Sweeper] with its [txrmq.Publisher], both
// in their own group, and a [txrmq.Forwarder] of delayed messages in
// another (with [PartBackground]). cfg goes through
// [TransactionalConfig.WithDefaults] and [TransactionalConfig.Validate].
// It connects to no broker; with PartProducer it asks the database whether
// the checker and db reach the same schema (see [txrmq.NewTransactional]),
// so the database must answer. Call [Stack.Start].
func Transactional(db *gorm.DB, cfg TransactionalConfig) (*Stack, error) {
	if db == nil {
		return nil, invalid("db is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sweeperGroup := ""
	if cfg.Parts&PartBackground != 0 {
		sweeperGroup = cfg.Sweeper.Group
	}
	chk, err := checker.New(db, cfg.Checker)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	s := &Stack{mode: ModeTransactional, parts: cfg.Parts, db: db, log: cfg.Logger, chk: chk, sweeperGroup: sweeperGroup, instances: cfg.Heartbeat.Table}
	// The background parts are built first: their config errors come
	// before NewTransactional asks the database anything.
	var background []component
	if cfg.Parts&PartBackground != 0 {
		// The sweeper calls OnHeld, its publisher OnCheckBack.
		pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{
			Conn:        cfg.rocketMQ(),
			Group:       sweeperGroup,
			Hooks:       cfg.Hooks,
			SendTimeout: cfg.Producer.SendTimeout,
			Retries:     cfg.Producer.Retries,
			MaxBodySize: cfg.Producer.MaxBodySize,
			Topics:      cfg.Topics,
		})
		if err != nil {
			return nil, fmt.Errorf("stack: sweeper: %w", err)
		}
		s.pub = pub
		background = append(background, component{"sweeper's publisher", pub.Start, pub.Close})
		scfg := cfg.Sweeper
		scfg.Conn = cfg.rocketMQ()
		scfg.Hooks = cfg.Hooks
		scfg.ProducerGroups = []string{cfg.Group}
		scfg.Heartbeat = cfg.Heartbeat
		sw, err := txrmq.NewSweeper(chk, pub, scfg)
		if err != nil {
			s.components = background
			s.discard()
			return nil, fmt.Errorf("stack: %w", err)
		}
		s.sweeper = sw
		background = append(background, component{"sweeper", sw.Start, sw.Close})
		fcfg := cfg.Forwarder
		fcfg.Conn = cfg.rocketMQ()
		fcfg.DB = db
		fcfg.Heartbeat = cfg.Heartbeat
		if fcfg.MaxBodySize == 0 {
			fcfg.MaxBodySize = cfg.Producer.MaxBodySize
		}
		fw, err := txrmq.NewForwarder(fcfg)
		if err != nil {
			s.components = background
			s.discard()
			return nil, fmt.Errorf("stack: %w", err)
		}
		s.forwarder = fw
		background = append(background, component{"forwarder", fw.Start, fw.Close})
		if cfg.Reconcile {
			rcfg := cfg.reconciler()
			rcfg.DelayTopic = cfg.Producer.DelayTopic
			rec, err := txrmq.NewReconciler(chk, pub, rcfg)
			if err != nil {
				s.components = background
				s.discard()
				return nil, fmt.Errorf("stack: %w", err)
			}
			s.rec = rec
			background = append(background, component{"reconciler", rec.Start, rec.Close})
		}
	}
	if cfg.Parts&PartProducer != 0 {
		pcfg := cfg.Producer
		pcfg.Conn = cfg.rocketMQ()
		pcfg.Group = cfg.Group
		pcfg.Hooks = cfg.Hooks
		pcfg.Topics = cfg.Topics
		pcfg.Heartbeat = cfg.Heartbeat
		txp, err := txrmq.NewTransactional(db, chk, pcfg)
		if err != nil {
			s.components = background
			s.discard()
			return nil, fmt.Errorf("stack: %w", err)
		}
		s.txp, s.tr = txp, txp
		s.components = append(s.components, component{"transactional producer", txp.Start, txp.Close})
	}
	s.components = append(s.components, background...)
	return s, nil
}

// Outbox builds a local-table stack on db, the service's database, where
// the outbox table lives and the local transactions run (its MySQL DSN
// needs parseTime=true): an [outbox.Outbox] on db (the Transactor, with
// [PartProducer]) and cfg.Relays [outbox.Relay]s publishing through a
// [txrmq.Publisher] in group cfg.Group (with [PartBackground]).
// cfg goes through [OutboxConfig.WithDefaults] and
// [OutboxConfig.Validate]. It connects nothing; call [Stack.Start].
func Outbox(db *gorm.DB, cfg OutboxConfig) (*Stack, error) {
	if db == nil {
		return nil, invalid("db is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ocfg := cfg.Outbox
	ocfg.Hooks = cfg.Hooks
	ob, err := outbox.New(db, ocfg)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	s := &Stack{mode: ModeOutbox, parts: cfg.Parts, db: db, log: cfg.Logger, ob: ob, instances: cfg.Heartbeat.Table}
	if cfg.Parts&PartProducer != 0 {
		s.tr = ob
	}
	if cfg.Parts&PartBackground == 0 {
		return s, nil
	}
	s.barrier = cfg.Publisher.Checker
	pcfg := cfg.Publisher
	pcfg.Conn = cfg.rocketMQ()
	pcfg.Group = cfg.Group
	pcfg.Hooks = cfg.Hooks // its check-back answers
	pcfg.Topics = cfg.Topics
	pub, err := txrmq.NewPublisher(pcfg)
	if err != nil {
		return nil, fmt.Errorf("stack: relay: %w", err)
	}
	s.pub = pub
	for i := range cfg.Relays {
		rcfg := cfg.Relay
		rcfg.Hooks = cfg.Hooks
		if cfg.Relays > 1 {
			rcfg.Name = fmt.Sprintf("%s-%d", rcfg.Name, i+1)
		}
		r, err := outbox.NewRelay(ob, pub, rcfg)
		if err != nil {
			s.discard()
			return nil, fmt.Errorf("stack: %w", err)
		}
		s.relays = append(s.relays, r)
	}
	s.components = append(s.components,
		component{"relays' publisher", pub.Start, pub.Close},
		component{"relays", s.startRelays, s.closeRelays})
	if cfg.Reconcile {
		rec, err := txrmq.NewReconciler(ob, pub, cfg.reconciler())
		if err != nil {
			s.discard()
			return nil, fmt.Errorf("stack: %w", err)
		}
		s.rec = rec
		s.components = append(s.components, component{"reconciler", rec.Start, rec.Close})
	}
	return s, nil
}

// discard releases the clients of a stack whose construction failed.
func (s *Stack) discard() {
	for i := len(s.components) - 1; i >= 0; i-- {
		_ = s.components[i].close(context.Background())
	}
}

// Mode returns [ModeTransactional] or [ModeOutbox].
func (s *Stack) Mode() string { return s.mode }

// Parts returns the parts this stack runs.
func (s *Stack) Parts() Part { return s.parts }

// Migrate creates or updates the mode's tables: the barrier table, or the
// outbox table and its lease table (and, with OutboxConfig.Publisher.Checker, the
// barrier table too), and in both modes the instance table
// (Config.Heartbeat.Table). It needs no broker and may run before
// Start. The SQL files next to the packages (checker/barrier.sql,
// adapters/outbox/outbox.sql, fleet/fleet.sql) hold the same tables for
// migration tools.
func (s *Stack) Migrate(ctx context.Context) error {
	if err := fleet.Migrate(ctx, s.db, s.instances); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	if s.chk != nil {
		return s.chk.Migrate(ctx)
	}
	if s.barrier != nil {
		if err := s.barrier.Migrate(ctx); err != nil {
			return err
		}
	}
	return s.ob.Migrate(ctx)
}

// Start starts the parts in order: the transactional producer, then the
// sweeper's publisher and the sweeper; or the relays' publisher, then the
// relays; then, with Config.Reconcile, the reconciler. The relays run until Close, not until ctx ends. Start is
// idempotent. When a part fails to start, Start closes the parts it had
// started and returns the error; the stack cannot be started again.
func (s *Stack) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state.Load() {
	case stateStarted:
		return nil
	case stateClosed:
		return txmsg.ErrClosed
	}
	for i, c := range s.components {
		if err := c.start(ctx); err != nil {
			s.state.Store(stateClosed)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			errs := []error{fmt.Errorf("stack: start %s: %w", c.name, err)}
			for j := i; j >= 0; j-- { // the failed one too: its client may hold resources
				if err := s.components[j].close(cctx); err != nil {
					errs = append(errs, fmt.Errorf("stack: close %s: %w", s.components[j].name, err))
				}
			}
			return errors.Join(errs...)
		}
	}
	s.state.Store(stateStarted)
	return nil
}

// Close stops the parts in the reverse order of Start: the reconciler,
// relays or sweeper first (a batch being published is finished and marked), then their
// publisher, then the transactional producer, whose sends under way finish
// first. What ctx cuts short is left for the next start: pending rows stay
// pending, and the broker asks the group's other producers about open
// transactions. Close is idempotent; after it Transact returns
// [txmsg.ErrClosed].
func (s *Stack) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.Swap(stateClosed) == stateClosed {
		return nil
	}
	var errs []error
	for i := len(s.components) - 1; i >= 0; i-- {
		c := s.components[i]
		if err := c.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stack: close %s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// Transact implements [txmsg.Transactor] through the mode's producer: see
// [txrmq.Transactional.Transact] and [outbox.Outbox.Transact]. It fails
// before Start and after Close, and with [ErrNoProducer] when the stack
// does not run [PartProducer].
func (s *Stack) Transact(ctx context.Context, msg *txmsg.Message, local txmsg.LocalTx) (*txmsg.Receipt, error) {
	if s.tr == nil {
		return nil, ErrNoProducer
	}
	switch s.state.Load() {
	case stateNew:
		return nil, fmt.Errorf("stack: %s stack not started; call Start first", s.mode)
	case stateClosed:
		return nil, txmsg.ErrClosed
	}
	return s.tr.Transact(ctx, msg, local)
}

// Health reports whether the stack can get events to the broker now. It
// returns nil when healthy; otherwise the errors of the failing parts:
// the transactional producer's database and topic routes
// ([txrmq.Transactional.Health]), each relay's database and lag
// ([outbox.Relay.Health]), the forwarder of delayed messages
// ([txrmq.Forwarder.Health]), and the database of the parts that have no
// check of their own (the outbox writer, a sweeper without a producer).
// Meant for readiness probes; bounded by ctx.
func (s *Stack) Health(ctx context.Context) error {
	switch s.state.Load() {
	case stateNew:
		return fmt.Errorf("stack: %s stack not started", s.mode)
	case stateClosed:
		return fmt.Errorf("stack: %s stack: %w", s.mode, txmsg.ErrClosed)
	}
	var errs []error
	if s.txp != nil {
		errs = append(errs, s.txp.Health(ctx))
	} else if s.sweeper != nil || (s.ob != nil && s.tr != nil) {
		if err := ping(ctx, s.db); err != nil {
			errs = append(errs, fmt.Errorf("stack: %s: database: %w", s.mode, err))
		}
	}
	if s.forwarder != nil {
		errs = append(errs, s.forwarder.Health(ctx))
	}
	for _, r := range s.relays {
		if err := r.Health(ctx); err != nil {
			errs = append(errs, err)
			break // the others share the table and the database
		}
	}
	return errors.Join(errs...)
}

func ping(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// startRelays runs every relay until closeRelays, and returns once they
// all run.
func (s *Stack) startRelays(ctx context.Context) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	s.stopRelays, s.relaysDone = stop, done
	var wg sync.WaitGroup
	for _, r := range s.relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(runCtx); err != nil {
				s.log.Error("outbox relay stopped", "relay", r.Name(), "err", err)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	for _, r := range s.relays {
		for !r.Running() {
			select {
			case <-done:
				return errors.New("outbox relays stopped at once")
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}

// closeRelays stops the relays and waits for them, or for ctx.
func (s *Stack) closeRelays(ctx context.Context) error {
	if s.stopRelays == nil {
		return nil
	}
	s.stopRelays()
	select {
	case <-s.relaysDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("outbox relays still running: %w", ctx.Err())
	}
}

// Checker returns the barrier table's checker, or nil in local-table mode.
func (s *Stack) Checker() *checker.Checker { return s.chk }

// Transactional returns the transactional producer, or nil (local-table
// mode, or no [PartProducer]).
func (s *Stack) Transactional() *txrmq.Transactional { return s.txp }

// Forwarder returns the forwarder of delayed messages, or nil (local-table
// mode, or no [PartBackground]).
func (s *Stack) Forwarder() *txrmq.Forwarder { return s.forwarder }

// Reconciler returns the reconciler, or nil (Config.Reconcile off, or
// no [PartBackground]).
func (s *Stack) Reconciler() *txrmq.Reconciler { return s.rec }

// Sweeper returns the sweeper, or nil (local-table mode, or no
// [PartBackground]).
func (s *Stack) Sweeper() *txrmq.Sweeper { return s.sweeper }

// Publisher returns the sweeper's or the relays' publisher, or nil without
// [PartBackground]. Its Start is idempotent: a caller may start it, and
// send through it, before [Stack.Start].
func (s *Stack) Publisher() *txrmq.Publisher { return s.pub }

// Outbox returns the outbox, or nil in transactional mode. Its Stats,
// Dead and Requeue serve metrics and operations.
func (s *Stack) Outbox() *outbox.Outbox { return s.ob }

// Relays returns the relays, or nil (transactional mode, or no
// [PartBackground]).
func (s *Stack) Relays() []*outbox.Relay { return s.relays }

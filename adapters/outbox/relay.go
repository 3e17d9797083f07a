package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// Relay publishes pending outbox rows through a [txmsg.Publisher]. Run
// several relays, in one process or many, for throughput and availability:
// they never publish a row twice between them, except after a crash
// between publishing and marking, or when a relay cannot mark what it
// published for longer than [RelayConfig.LeaseTTL]. A claim transaction
// that fails after publishing (a deadlock victim, a lock wait timeout, a
// lost connection) does not count: the relay marks the rows in a new
// transaction before it claims again.
// Relays share the rows through bucket leases (see [Config.Buckets]).
type Relay struct {
	ob  *Outbox
	db  *gorm.DB
	pub txmsg.Publisher
	cfg RelayConfig
	log *slog.Logger
	// table and buckets are the Outbox's (Config.Table, Config.Buckets).
	table   string
	buckets int

	running atomic.Bool
	lease   leaseState // touched only by Run's goroutine
	// leaseRounds counts the lease rounds run, and leaseMoves the buckets
	// this relay handed over or released for being above its share.
	leaseRounds, leaseMoves atomic.Int64

	// cycle counts what the marks of the current cycle saw, and outage
	// how long the broker has been failing this relay; both are touched
	// only by Run's goroutine. unavailable is the outage as Health reports
	// it, nil while publishes succeed.
	cycle struct {
		sent, waiting int
		err           error
	}
	outage struct {
		streak int
		since  time.Time
		// wait is the exponent of the waiting rows' backoff: streak,
		// except that a broker's return signalled by the publisher starts
		// it again from zero, so rows that fail while the broker starts
		// up retry after MinBackoff.
		wait int
		// released: this outage's waiting rows were made due after the
		// relay published again.
		released bool
	}
	unavailable atomic.Pointer[outageState]
	// standby is set while the relay has handed its buckets over for
	// being cut off from the broker (see RelayConfig.HandOverAfter):
	// until is when it joins the lease rounds again. probing is set from
	// then until it publishes: a cycle that only waits for the broker
	// meanwhile hands the buckets over again at once. Run's goroutine.
	standby struct {
		until   time.Time
		probing bool
	}
	// meanBody is the mean body size of the last claim (Run's goroutine).
	meanBody int
	// skipped is the wait before the next claim while due rows of the
	// relay's buckets are held by another transaction (see
	// lookAgainSoon); zero while none are (Run's goroutine).
	skipped time.Duration
	// wake receives the Outbox's nudges (Notify) while Run runs, and
	// nudged says one arrived since the current cycle began (Run's
	// goroutine; see takeNudge).
	wake   <-chan struct{}
	nudged bool
	// noDeliverAt: the table lacks the deliver_at column (set by Run).
	noDeliverAt bool

	// unmarked holds the marks of a claim whose transaction failed after
	// it published: they are applied in a new transaction before the
	// relay claims again (Run's goroutine).
	unmarked *markPlan
	// remarked counts the plans applied after their claim failed.
	remarked atomic.Int64

	// now is the relay's clock, time.Now; tests skew it.
	now func() time.Time

	// afterPublish, set by tests, runs after a batch is published and
	// before it is marked. An error simulates a crash at that point: the
	// claim transaction rolls back and Run returns the error.
	afterPublish func(ctx context.Context, msgs []*txmsg.Message) error
	// beforeMark, set by tests, runs in the claim transaction after
	// afterPublish when the claim published a row. An error fails the transaction, as a failing mark
	// would (a deadlock, a lost connection).
	beforeMark func(ctx context.Context, tx *gorm.DB) error
}

// outageState is a broker outage seen by a relay.
type outageState struct {
	since   time.Time
	waiting int
	err     string
	// rejoin, when set, is when the relay, which has handed its buckets
	// over, joins the lease rounds again.
	rejoin time.Time
}

// crashError carries afterPublish's error out of Run.
type crashError struct{ err error }

func (e *crashError) Error() string { return "outbox: relay stopped by test hook: " + e.err.Error() }
func (e *crashError) Unwrap() error { return e.err }

// Error backoff of the relay loop while the database fails.
const (
	minErrorBackoff = 100 * time.Millisecond
	maxErrorBackoff = 5 * time.Second
)

// NewRelay returns a Relay publishing the rows of ob's table through
// publisher; ob's commits wake it without waiting for the next poll. It
// reads the table through the handle ob was made with, and takes its
// table and number of buckets from ob. cfg goes through
// [RelayConfig.WithDefaults] and [RelayConfig.Validate]. Call Run to
// start it.
func NewRelay(ob *Outbox, publisher txmsg.Publisher, cfg RelayConfig) (*Relay, error) {
	if ob == nil || publisher == nil {
		return nil, fmt.Errorf("%w: relay: an Outbox and a publisher are required", txmsg.ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hooks, err := driver.BindHooks(cfg.Hooks, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("%w: relay: Hooks: %w", txmsg.ErrInvalidConfig, err)
	}
	cfg.Hooks = hooks
	return &Relay{
		ob:      ob,
		db:      ob.q, // every statement of the relay is its own
		pub:     publisher,
		cfg:     cfg,
		table:   ob.cfg.Table,
		buckets: ob.cfg.Buckets,
		now:     time.Now,
		log:     cfg.Logger.With("component", "txmsg.relay", "relay", cfg.Name, "table", ob.cfg.Table),
	}, nil
}

// Name returns the relay's name, as used in leases and logs.
func (r *Relay) Name() string { return r.cfg.Name }

// Run publishes pending rows until ctx is cancelled, then returns nil. It
// returns an error only when the Relay is already running.
//
// Run keeps going through failures: when the database fails it logs, backs
// off (up to 5 s) and tries again; when the broker fails the rows back off
// (see [RelayConfig.MinBackoff] and [RelayConfig.MaxWaitBackoff]) and
// nothing is lost. When the publisher implements
// [txmsg.BrokerReturnNotifier], Run retries the rows of its buckets that
// wait for the broker as soon as it signals a broker's return. On cancellation a
// batch being published is finished and marked (within PublishTimeout); a
// batch not yet published is abandoned, its transaction rolled back and its
// rows left pending. Run releases its bucket leases and deletes its row of
// the relay table on the way out, so other relays take over at once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("outbox: relay %s is already running", r.cfg.Name)
	}
	defer r.running.Store(false)
	r.log.Info("relay started", "ordered", r.cfg.Ordered, "batch_size", r.cfg.BatchSize, "poll_interval", r.cfg.PollInterval)
	defer r.log.Info("relay stopped")

	wake, stopWake := r.ob.subscribe()
	defer stopWake()
	r.wake = wake
	var back <-chan struct{}
	if n, ok := r.pub.(txmsg.BrokerReturnNotifier); ok {
		ch, stop := n.NotifyBrokerReturn()
		defer stop()
		back = ch
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	if r.cfg.Retention > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); r.purgeLoop(bg) }()
	}
	r.checkColumns(ctx)
	r.lease = leaseState{owned: map[int]time.Time{}}
	r.standby.until, r.standby.probing = time.Time{}, false
	defer r.releaseLeases(ctx)
	// Before the leases go: marks still held are applied while no other
	// relay can claim their rows.
	defer r.remarkOnExit(ctx)
	failures := 0
	for ctx.Err() == nil {
		var res cycleResult
		var err error
		r.cycle.sent, r.cycle.waiting, r.cycle.err = 0, 0, nil
		r.forgetNudge()
		if r.cfg.Ordered {
			res, err = r.cycleOrdered(ctx)
		} else {
			res, err = r.cycleUnordered(ctx)
		}
		var crash *crashError
		if errors.As(err, &crash) {
			return crash
		}
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			failures++
			d := jitter(expBackoff(minErrorBackoff, maxErrorBackoff, failures))
			r.log.Warn("relay cycle failed; retrying", "err", err, "failures", failures, "retry_in", d)
			sleep(ctx, nil, nil, d)
			continue
		}
		if failures > 0 {
			r.log.Info("relay recovered", "failures", failures)
			failures = 0
		}
		if r.trackOutage(ctx) || res.more || r.takeNudge() {
			continue
		}
		r.nextDue(ctx, &res)
		d := r.cfg.PollInterval
		if res.retryIn > 0 && res.retryIn < d {
			d = res.retryIn
		}
		if sleep(ctx, wake, back, d) == wokeBack {
			r.outage.wait = 0
			if !r.standby.until.IsZero() {
				r.rejoin("the publisher signalled a broker's return")
				continue
			}
			r.releaseWaiting(ctx, "the publisher signalled a broker's return")
		}
	}
	return nil
}

// forgetNudge drops a nudge that came before the cycle about to begin:
// that cycle's claim answers it.
func (r *Relay) forgetNudge() {
	r.nudged = false
	select {
	case <-r.wake:
	default:
	}
}

// takeNudge reports whether the Outbox was nudged since the current cycle
// began. A nudged relay claims again at once, so the reads that only
// choose how long to sleep (nextDue, lookAgainSoon) are skipped: under a
// steady stream of commits each cycle saves their round trips, and a
// commit that arrived during a cycle waits that much less for the next
// claim.
func (r *Relay) takeNudge() bool {
	if !r.nudged {
		select {
		case <-r.wake:
			r.nudged = true
		default:
		}
	}
	return r.nudged
}

// cycleResult tells Run when to look again.
type cycleResult struct {
	// more means a full batch was published: look again at once.
	more bool
	// retryIn, when positive, is when rows held back now become
	// publishable, if that is sooner than the next poll.
	retryIn time.Duration
}

func (c *cycleResult) retryAt(now, t time.Time) {
	d := max(t.Sub(now), 5*time.Millisecond)
	if c.retryIn == 0 || d < c.retryIn {
		c.retryIn = d
	}
}

// nextDue makes res wake the relay when the next pending row that is not
// due yet becomes due: a delayed message (txmsg.WithDelay) or a row
// backing off, in any bucket. The read takes one entry of the (status,
// next_attempt_at, id) index. Rows inserted by other processes are seen
// at the next cycle (their commit's Notify, or the poll).
func (r *Relay) nextDue(ctx context.Context, res *cycleResult) {
	var next struct {
		Due time.Time `gorm:"column:due"`
		Now time.Time `gorm:"column:db_now"`
	}
	err := find(r.db.WithContext(ctx), func(db *gorm.DB) *gorm.DB {
		return db.Table(r.table).Select("next_attempt_at AS due, UTC_TIMESTAMP(6) AS db_now").
			Where("status = ? AND next_attempt_at > UTC_TIMESTAMP(6)", StatusPending).
			Order("next_attempt_at").Limit(1)
	}, &next)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Debug("cannot read the next due row; waiting for the poll", "err", err)
		}
		return
	}
	if !next.Due.IsZero() {
		res.retryAt(next.Now, next.Due)
	}
}

// What ended a sleep.
const (
	wokeTimer = iota
	wokeCtx
	wokeNudge
	wokeBack
)

// sleep waits for d, a nudge on wake, a broker's return on back (nil:
// none) or ctx, and says which came first.
func sleep(ctx context.Context, wake, back <-chan struct{}, d time.Duration) int {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return wokeCtx
	case <-wake:
		return wokeNudge
	case <-back:
		return wokeBack
	case <-t.C:
		return wokeTimer
	}
}

// inTx runs fn in a READ COMMITTED transaction. The transaction itself
// is not bound to ctx, so cancelling Run does not roll back a batch that
// is being published; fn uses ctx for the statements that may be
// abandoned.
func (r *Relay) inTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.PublishTimeout+time.Minute)
	defer cancel()
	return r.db.WithContext(txCtx).Transaction(fn, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}

// expBackoff returns lo·2^(n-1), capped at hi.
func expBackoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// jitter draws a delay from [d/2, d], so relays and rows that failed
// together do not retry together.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

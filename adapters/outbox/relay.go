package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
)

// Relay publishes pending outbox rows through a [txmsg.Publisher]. Run
// several relays, in one process or many, for throughput and availability:
// they never publish a row twice between them, except after a crash
// between publishing and marking, or when a relay cannot mark what it
// published for longer than [RelayConfig.LeaseTTL]. A claim transaction
// that fails after publishing (a deadlock victim, a lock wait timeout, a
// lost connection) does not count: the relay marks the rows in a new
// transaction before it claims again.
// Relays share the rows through bucket leases (see [RelayConfig.Buckets]).
type Relay struct {
	db  *gorm.DB
	pub txmsg.Publisher
	cfg RelayConfig
	log *slog.Logger

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

// NewRelay validates cfg and returns a Relay reading cfg.Table through db
// and publishing through publisher. Call Run to start it. db's MySQL DSN
// must carry parseTime=true, as for [New].
func NewRelay(db *gorm.DB, publisher txmsg.Publisher, cfg RelayConfig) (*Relay, error) {
	if db == nil || publisher == nil {
		return nil, fmt.Errorf("%w: relay: db and publisher are required", txmsg.ErrInvalidConfig)
	}
	if err := store.CheckParseTime(db); err != nil {
		return nil, fmt.Errorf("%w: relay: %w", txmsg.ErrInvalidConfig, err)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Relay{
		db:  store.Quiet(db), // every statement of the relay is its own
		pub: publisher,
		cfg: cfg,
		now: time.Now,
		log: cfg.Logger.With("component", "txmsg.relay", "relay", cfg.Name, "table", cfg.Table),
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

	var wake <-chan struct{}
	if r.cfg.Outbox != nil {
		ch, stop := r.cfg.Outbox.subscribe()
		defer stop()
		wake = ch
	}
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
		if r.trackOutage(ctx) || res.more {
			continue
		}
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

// trackOutage updates the relay's view of a broker outage after a cycle:
// a cycle whose publishes only waited for the broker extends it (and the
// backoff of the rows that wait); one that published and waited for
// nothing ends it, and so does one that tried nothing while no row of the
// table waits for the broker any more (another relay may have published
// them, or taken this relay's buckets).
//
// The first cycle of an outage that publishes again makes the rows of
// the relay's buckets that still wait for the broker due at once; then
// trackOutage returns true: the next cycle should start now. A relay
// whose publishes have failed for HandOverAfter hands its buckets over
// (see handOver); its outage then ends only when it publishes again.
func (r *Relay) trackOutage(ctx context.Context) (again bool) {
	c := r.cycle
	if c.sent > 0 {
		r.standby.probing = false
	}
	defer r.handOverIfCutOff(ctx)
	if c.sent > 0 && r.outage.streak > 0 && !r.outage.released {
		r.outage.released = true
		again = r.releaseWaiting(ctx, "the relay publishes again") > 0
	}
	switch {
	case c.waiting > 0 && c.sent == 0:
		if r.outage.streak == 0 {
			r.outage.since = time.Now()
			r.outage.released = false
			r.outage.wait = 0
			r.log.Warn("broker unavailable; pending rows wait for it without counting attempts", "waiting", c.waiting, "err", c.err)
		}
		r.outage.streak++
		r.outage.wait++
		r.unavailable.Store(&outageState{since: r.outage.since, waiting: c.waiting, err: c.err.Error()})
	case c.waiting == 0 && r.outage.streak > 0 && (c.sent > 0 || (r.standby.until.IsZero() && !r.rowsWaiting(ctx))):
		r.log.Info("broker available again", "unavailable_for", time.Since(r.outage.since).Round(time.Millisecond))
		r.outage.streak, r.outage.wait = 0, 0
		r.unavailable.Store(nil)
	}
	return again
}

// handOverIfCutOff hands the relay's buckets over when its last cycle
// only waited for the broker and its publishes have failed for
// HandOverAfter, or since it joined the lease rounds again after handing
// them over. A relay that reaches the database but not the broker would
// otherwise renew its leases, and keep its rows and keys from the other
// relays, for as long as the outage lasts. It does so only while another
// relay is live (a relay alone has nobody to hand them to) and holds no
// marks to apply again (which need its leases).
//
// The relay releases its leases, withdraws its asks and deletes its row
// of the relay table, all between batches, holding no lock in any bucket:
// the other relays count one relay fewer and take the buckets at their
// next lease round. It then runs no lease round and claims nothing until
// HandOverAfter has passed or its publisher signals a broker's return;
// Health reports the outage all along.
func (r *Relay) handOverIfCutOff(ctx context.Context) {
	c, o := r.cycle, &r.outage
	if r.cfg.HandOverAfter < 0 || c.waiting == 0 || c.sent > 0 || !r.standby.until.IsZero() || r.unmarked != nil || ctx.Err() != nil {
		return
	}
	if !r.standby.probing && time.Since(o.since) < r.cfg.HandOverAfter {
		return
	}
	if r.lease.members < 2 {
		return
	}
	held := len(r.lease.owned)
	r.releaseLeases(ctx)
	err := r.db.WithContext(ctx).Table(r.leaseTable()).Where("bucket < ? AND wanted_by = ?", r.cfg.Buckets, r.cfg.Name).
		Updates(map[string]any{"wanted_by": "", "wanted_at": time.Unix(1, 0).UTC()}).Error
	if err != nil {
		r.log.Warn("cannot withdraw this relay's asks for buckets; they lapse after the lease TTL", "err", err)
	}
	r.lease.next = time.Time{}
	r.standby.until = time.Now().Add(r.cfg.HandOverAfter)
	r.standby.probing = false
	r.log.Warn("broker unavailable for too long; buckets handed to the other relays",
		"unavailable_for", time.Since(o.since).Round(time.Millisecond), "buckets", held, "relays", r.lease.members,
		"rejoin_in", r.cfg.HandOverAfter, "err", c.err)
	if s := r.unavailable.Load(); s != nil {
		next := *s
		next.rejoin = r.standby.until
		r.unavailable.Store(&next)
	}
}

// rejoin ends the relay's standby: it joins the lease rounds at its next
// cycle, and hands the buckets it gets over again at once if its
// publishes still fail.
func (r *Relay) rejoin(why string) {
	r.standby.until = time.Time{}
	r.standby.probing = true
	r.log.Info("joining the lease rounds again to try the broker", "why", why)
	if s := r.unavailable.Load(); s != nil {
		next := *s
		next.rejoin = time.Time{}
		r.unavailable.Store(&next)
	}
}

// releaseLimit bounds the rows one release makes due, in batches of the
// relay: enough to keep it busy; the rest are due within MaxWaitBackoff.
const releaseLimit = 20

// releaseWaiting makes the pending rows of the relay's buckets that wait
// for the broker due now, at most releaseLimit batches of them, and
// returns how many it released. Only the relay's own buckets: their rows
// are claimed by this relay alone, so the update waits for no other
// relay's claim, and each relay releases its rows when it sees the broker
// back. Key order is kept in ordered mode: next_attempt_at only says when
// a row may go, never which row of a key goes first. A failure is logged
// and otherwise ignored: the rows are due within MaxWaitBackoff anyway.
func (r *Relay) releaseWaiting(ctx context.Context, why string) int64 {
	owned := r.lease.usable(r.now(), r.cfg.LeaseTTL)
	if len(owned) == 0 || ctx.Err() != nil {
		return 0
	}
	res := r.db.WithContext(ctx).Table(r.cfg.Table).
		Where("status = ? AND last_error LIKE ? AND next_attempt_at > UTC_TIMESTAMP(6)", StatusPending, waitingPrefix+"%").
		Where(r.inBuckets(r.db, owned)).
		Limit(releaseLimit*r.cfg.BatchSize).
		Update("next_attempt_at", gorm.Expr("UTC_TIMESTAMP(6)"))
	if res.Error != nil {
		if ctx.Err() == nil {
			r.log.Warn("cannot retry the rows waiting for the broker now; they retry on their own schedule", "why", why, "err", res.Error)
		}
		return 0
	}
	if res.RowsAffected > 0 {
		r.log.Info("retrying the rows waiting for the broker now", "why", why, "rows", res.RowsAffected)
	}
	return res.RowsAffected
}

// rowsWaiting reports whether a pending row of the table waits for the
// broker; on a database error it says yes, so that Health keeps the
// outage it knows of.
func (r *Relay) rowsWaiting(ctx context.Context) bool {
	var ids []int64
	err := r.db.WithContext(ctx).Table(r.cfg.Table).
		Where("status = ? AND last_error LIKE ?", StatusPending, waitingPrefix+"%").
		Limit(1).Pluck("id", &ids).Error
	return err != nil || len(ids) > 0
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

// Re-applying the marks of a failed claim: remarkTries attempts in a
// row, remarkBackoff doubling between them; a plan still not applied is
// kept and tried again at the start of each cycle, for up to
// remarkHoldTTLs lease TTLs after the claim failed.
const (
	remarkTries    = 5
	remarkBackoff  = 50 * time.Millisecond
	remarkHoldTTLs = 10
)

// recoverMarks runs after a claim transaction failed with err. When the
// claim had published rows, or recorded failures, before it failed, the
// rows are still pending (or, after a lost COMMIT, perhaps marked): the
// marks are held and applied again in a new transaction before the relay
// claims anything else, so that a deadlock, a lock wait timeout or a lost
// connection does not make the next claim publish the rows again.
// plan is the claim's marks if it got to work them out, nil otherwise.
// It reports whether the marks are applied; false means err stands
// (nothing was published, or the marks are held for the next cycle).
//
// A test hook's simulated crash is left alone: a crashed relay marks
// nothing.
func (r *Relay) recoverMarks(ctx context.Context, err error, rows []*Row, results []error, plan *markPlan) bool {
	var crash *crashError
	if errors.As(err, &crash) || rows == nil {
		return false
	}
	if plan == nil {
		plan = r.planMarks(rows, results)
	}
	if len(plan.updates) == 0 {
		return false
	}
	plan.since = time.Now()
	r.unmarked = plan
	r.log.Warn("claim transaction failed after publishing; marking its rows in a new transaction",
		"err", err, "sent", plan.sent, "rows", plan.rows())
	return r.remark(ctx) == nil
}

// remark applies the held marks, if any, in a new transaction, with up to
// remarkTries attempts. It returns nil once they are applied (or there
// are none), and the last error otherwise; the marks are then kept for
// the next cycle, unless they are older than remarkHoldTTLs lease TTLs.
//
// In the new transaction the rows are no longer locked, so the update is
// guarded (see applyMarks): it changes only rows still as claimed. Until
// it applies, no other relay claims them: in both modes a relay claims
// only from the buckets it leases, and this relay neither claims nor runs
// a lease round, which is where it would hand a bucket over, while marks
// are held. Only if its lease runs out meanwhile may another relay
// publish the rows again, as after a crash.
func (r *Relay) remark(ctx context.Context) error {
	p := r.unmarked
	if p == nil {
		return nil
	}
	var err error
	for try := 1; try <= remarkTries; try++ {
		if try > 1 {
			time.Sleep(jitter(expBackoff(remarkBackoff, maxErrorBackoff, try-1)))
		}
		var changed int64
		err = r.inTx(ctx, func(tx *gorm.DB) error {
			var err error
			changed, err = r.applyMarks(tx, p, true)
			return err
		})
		if err == nil {
			r.unmarked = nil
			r.remarked.Add(1)
			r.log.Info("rows of the failed claim marked", "sent", p.sent, "rows", p.rows(), "changed", changed,
				"left", int64(p.rows())-changed, "tries", try)
			return nil
		}
	}
	if time.Since(p.since) > remarkHoldTTLs*r.cfg.LeaseTTL {
		r.unmarked = nil
		r.log.Error("giving up marking the rows of a failed claim; other relays own their buckets by now and may publish them again",
			"err", err, "sent", p.sent, "rows", p.rows(), "failed_at", p.since)
		return fmt.Errorf("outbox: mark %d rows of a failed claim: %w", p.rows(), err)
	}
	r.log.Warn("cannot mark the rows of a failed claim yet; the relay claims nothing until they are",
		"err", err, "sent", p.sent, "rows", p.rows(), "tries", remarkTries)
	return fmt.Errorf("outbox: mark %d rows of a failed claim: %w", p.rows(), err)
}

// remarkOnExit makes a last attempt at held marks when Run returns.
func (r *Relay) remarkOnExit(ctx context.Context) {
	if r.unmarked == nil {
		return
	}
	if err := r.remark(context.WithoutCancel(ctx)); err != nil && r.unmarked != nil {
		r.log.Error("relay stops with rows published but not marked; they will be published again",
			"err", err, "sent", r.unmarked.sent, "rows", r.unmarked.rows())
		r.unmarked = nil
	}
}

// hookBeforeMark runs the beforeMark test hook when the claim published
// a row.
func (r *Relay) hookBeforeMark(ctx context.Context, tx *gorm.DB, results []error) error {
	if r.beforeMark == nil || !slices.Contains(results, nil) {
		return nil
	}
	return r.beforeMark(ctx, tx)
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

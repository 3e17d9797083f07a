package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/heartbeat"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// CheckMaxTimeTopic is where the broker moves a half message after
// transactionCheckMax unanswered check-backs. Brokers before RocketMQ 4.5.2
// only log such a half message ("has been checked too many times, so discard
// it") and drop it, so there is nothing to sweep.
const CheckMaxTimeTopic = "TRANS_CHECK_MAX_TIME_TOPIC"

// DefaultHoldFor is SweeperConfig.HoldFor's default.
const DefaultHoldFor = time.Minute

// SweeperConfig configures a [Sweeper].
type SweeperConfig struct {
	Conn
	// Group is the sweeper's own consumer group. Required.
	Group string
	// Hooks observe the sweeper's events (see txmsg.Hook): OnHeld for the
	// half messages it parks for an operator. A hook that implements no
	// hook interface is refused. Optional.
	Hooks txmsg.Hooks
	// ProducerGroups are the transactional producer groups whose
	// transactions this sweeper's database records. Half messages of other
	// groups are acknowledged and left alone. Required.
	ProducerGroups []string
	// HoldFor is how long the sweeper keeps retrying one half message
	// in-process (backing off from 500 ms to 10 s) while the barrier or
	// the broker fails, before handing it back to the broker for a later
	// delivery. While the barrier's database does not answer at all, or
	// while the republish fails because the broker or the route to the
	// topic is unavailable ([txmsg.IsUnavailable]), the sweeper holds the
	// half message past HoldFor until the database answers or the broker
	// takes the event: each hand-back counts toward the sweeper group's
	// redeliveries (16, then %DLQ%<Group>, which nothing reads), and an
	// outage must not use them up (the client itself hands back a message
	// held for its consume timeout, 15 min: one redelivery each time).
	// Default [DefaultHoldFor] (1 minute).
	HoldFor time.Duration
	// RetryDelayLevel is the broker delay level of a handed-back message;
	// 0 uses the broker's schedule (10 s, 30 s, 1 min, ...). See
	// ConsumerConfig.RetryDelayLevel.
	RetryDelayLevel int
	// Parked is the inbox in whose parked table the sweeper parks a half
	// message whose outcome cannot be known because its barrier row may
	// have been purged (see checker.ErrBeyondPurgeHorizon), under the
	// sweeper's group: `txmsgctl parked list -kind consumer -group
	// <sweeper group>` lists them, and `parked requeue` publishes one once
	// an operator has checked that its transaction committed. Nil means
	// the parked table (txmsg.DefaultParkedTable) in the checker's
	// database. When parking fails, the message is left unacknowledged on
	// the broker.
	Parked *txmsg.Inbox
	// Heartbeat is the sweeper's row in the instance table, written from
	// Start to Close on the checker's database: its Health and its counts
	// (half messages republished, parked, failed attempts; see package
	// fleet). Optional: the zero value writes every 10 s into
	// txmsg_instances.
	Heartbeat fleet.Config
}

// Sweeper closes the one gap the check-back protocol leaves: when the
// database is unreachable through a half message's whole check window, the
// broker gives up and moves the half message to [CheckMaxTimeTopic] without
// delivering it. The sweeper consumes that topic; for each half message of
// its producer groups it asks the barrier ([checker.Checker.Resolve]) and,
// when the local transaction committed, publishes the event to its real
// topic as a normal message with the same txmsg ID. Rolled-back ones are
// dropped. Consumers dedupe by txmsg ID, so a rare second copy is harmless.
//
// While the database is unreachable, or the broker does not take the
// republished event, the sweeper holds the half message and retries (see
// [SweeperConfig.HoldFor]); nothing is acknowledged without an answer from
// the barrier and, for a committed transaction, the broker's acceptance of
// the event.
//
// The sweeper needs RocketMQ 4.5.2 or later: older brokers drop a discarded
// half message instead of moving it to CheckMaxTimeTopic.
//
// A half message older than the barrier's purge horizon has no answer: its
// barrier row may have been purged, and a missing row no longer means the
// transaction rolled back. The sweeper never drops such a message. It logs
// it at error level, calls the [txmsg.HookHeld] hooks, parks it in
// Parked and only then acknowledges it; if parking fails it leaves it
// on the broker.
type Sweeper struct {
	cfg    SweeperConfig
	chk    *checker.Checker
	pub    txmsg.Publisher
	log    *slog.Logger
	pc     rmq.PushConsumer
	groups map[string]bool

	opts []consumer.Option
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	// rc watches the brokers of CheckMaxTimeTopic once the consumer runs;
	// expired counts the queues re-created at a broker's return because
	// their pull was lost with it (see Consumer.Start).
	rc      *reconnector
	expired atomic.Int64
	// beat writes the instance's row from Start to Close; counts are its
	// counters.
	beat   *heartbeat.Beat
	counts heartbeat.Counters

	mu      sync.Mutex
	started bool
	closed  bool
}

// topicRetryEvery is how often a started sweeper looks for
// CheckMaxTimeTopic while the broker has not created it yet.
const topicRetryEvery = 5 * time.Second

// sweeperConcurrency is how many half messages a sweeper resolves at once.
const sweeperConcurrency = 4

// WithDefaults returns c with its zero fields set to their defaults
// (Parked excepted: nil is resolved by NewSweeper, which knows the
// checker). It checks nothing.
func (c SweeperConfig) WithDefaults() SweeperConfig {
	c.Conn = c.Conn.WithDefaults()
	if c.HoldFor == 0 {
		c.HoldFor = DefaultHoldFor
	}
	c.Heartbeat = c.Heartbeat.WithDefaults()
	return c
}

// Validate checks c, which WithDefaults has filled in. The error wraps
// [txmsg.ErrInvalidConfig] and names the field.
func (c SweeperConfig) Validate() error {
	const what = "sweeper"
	cc := c.consumer()
	if err := cc.validate(what); err != nil {
		return err
	}
	if err := validateHooks(what, c.Hooks); err != nil {
		return err
	}
	if c.HoldFor <= 0 {
		return fmt.Errorf("%w: %s: HoldFor must be positive (0 means %s)", txmsg.ErrInvalidConfig, what, DefaultHoldFor)
	}
	if len(c.ProducerGroups) == 0 {
		return fmt.Errorf("%w: %s: ProducerGroups is empty", txmsg.ErrInvalidConfig, what)
	}
	for _, g := range c.ProducerGroups {
		if !groupPattern.MatchString(g) {
			return fmt.Errorf("%w: %s: ProducerGroups: %q is not a valid group name", txmsg.ErrInvalidConfig, what, g)
		}
	}
	return c.Heartbeat.ValidateIn(what)
}

// consumer is the config of the sweeper's consumer of CheckMaxTimeTopic,
// defaulted.
func (c *SweeperConfig) consumer() ConsumerConfig {
	return ConsumerConfig{Conn: c.Conn, Group: c.Group, Concurrency: sweeperConcurrency, RetryDelayLevel: c.RetryDelayLevel}.WithDefaults()
}

// NewSweeper builds a sweeper that resolves through chk and republishes
// through pub (usually a [Publisher]), after filling cfg's defaults and
// validating it (see [SweeperConfig.WithDefaults] and
// [SweeperConfig.Validate]).
func NewSweeper(chk *checker.Checker, pub txmsg.Publisher, cfg SweeperConfig) (*Sweeper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if chk == nil || pub == nil {
		return nil, fmt.Errorf("%w: sweeper: checker and publisher are required", txmsg.ErrInvalidConfig)
	}
	hooks, err := driver.BindHooks(cfg.Hooks, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("sweeper: %w", err)
	}
	cfg.Hooks = hooks
	if cfg.Parked == nil {
		in, err := txmsg.NewInbox(chk.DB(), txmsg.InboxConfig{Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("%w: sweeper: %w", txmsg.ErrInvalidConfig, err)
		}
		cfg.Parked = in
	}
	s := &Sweeper{cfg: cfg, chk: chk, pub: pub, groups: map[string]bool{}, done: make(chan struct{}),
		log: cfg.Logger.With("component", "txmsg.sweeper", "group", cfg.Group)}
	for _, g := range cfg.ProducerGroups {
		s.groups[g] = true
		if cfg.Namespace != "" {
			s.groups[cfg.Namespace+"%"+g] = true
		}
	}
	cfg.redactCredentials()
	installLogBridge(cfg.Logger, cfg.ClientLogLevel)
	cc := cfg.consumer()
	s.opts = append(consumerOptions(&cc), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	return s, nil
}

// newConsumer builds a push consumer subscribed to CheckMaxTimeTopic. The
// client cannot start a consumer again after a failed Start, so each try
// gets a new one (consumerOptions gives each its own instance name).
func (s *Sweeper) newConsumer() (rmq.PushConsumer, error) {
	opts := append([]consumer.Option(nil), s.opts...)
	opts = append(opts, consumer.WithInstance(fmt.Sprintf("txmsg-sweeper-%d-%s", os.Getpid(), txmsg.NewID())))
	pc, err := rmq.NewPushConsumer(opts...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new sweeper: %w", err)
	}
	if err := pc.Subscribe(CheckMaxTimeTopic, consumer.MessageSelector{}, s.consume); err != nil {
		return nil, fmt.Errorf("rocketmq: sweeper subscribe %s: %w", CheckMaxTimeTopic, err)
	}
	return pc, nil
}

// startConsumer builds and starts a consumer; missing reports that the
// topic does not exist yet.
func (s *Sweeper) startConsumer() (pc rmq.PushConsumer, missing bool, err error) {
	pc, err = s.newConsumer()
	if err != nil {
		return nil, false, err
	}
	if err := pc.Start(); err != nil {
		return nil, strings.Contains(err.Error(), "route info not found"), fmt.Errorf("rocketmq: start sweeper: %w", err)
	}
	return pc, false, nil
}

// startConsumerWithin is startConsumer bounded by ctx: when ctx ends
// first, it returns ctx's error and the consumer is shut down once its
// start returns.
func (s *Sweeper) startConsumerWithin(ctx context.Context) (rmq.PushConsumer, bool, error) {
	pc, err := s.newConsumer()
	if err != nil {
		return nil, false, err
	}
	err = startWithin(ctx, pc, s.log, func(context.Context) error { return pc.Start() })
	if err != nil {
		return nil, strings.Contains(err.Error(), "route info not found"), fmt.Errorf("rocketmq: start sweeper: %w", err)
	}
	return pc, false, nil
}

// Start begins consuming. The broker creates [CheckMaxTimeTopic] when it
// first discards a half message; while it does not exist, Start succeeds and
// the sweeper looks for it every few seconds in the background.
//
// Start first asks the name servers for that topic's route, each within
// Conn.NameServerTimeout. When none answers, Start fails with an error
// that wraps txmsg.ErrUnavailable and names each name server and its
// error, and may be called again. Start is bounded by ctx throughout.
func (s *Sweeper) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return txmsg.ErrClosed
	}
	if s.started {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a, err := s.cfg.askNameServers(ctx, []string{s.cfg.brokerTopic(CheckMaxTimeTopic)})
	if err != nil {
		return fmt.Errorf("rocketmq: start sweeper of group %q: %w", s.cfg.Group, err)
	}
	var pc rmq.PushConsumer
	missing := len(a.missing) > 0
	if !missing {
		pc, missing, err = s.startConsumerWithin(ctx)
	}
	switch {
	case missing:
		s.log.Info("the broker has not discarded any half message yet, so " + CheckMaxTimeTopic +
			" does not exist; looking for it in the background (brokers before RocketMQ 4.5.2 never create it)")
		s.wg.Add(1)
		go s.awaitTopic()
	case err != nil:
		return err
	default:
		s.run(pc)
	}
	s.started = true
	s.beat = heartbeat.Start(s.chk.DB(), s.cfg.Heartbeat, fleet.KindSweeper, s.cfg.Group, s.Health, &s.counts, s.log)
	return nil
}

// Health reports whether the sweeper can do its work now: it is started
// and not closed, the barrier's database answers ([checker.Checker.Ping]),
// and a name server answers for CheckMaxTimeTopic (which may not exist
// yet). It returns nil when healthy; the error names the failing part.
// Bounded by ctx; meant for readiness probes.
func (s *Sweeper) Health(ctx context.Context) error {
	s.mu.Lock()
	started, closed := s.started, s.closed
	s.mu.Unlock()
	if err := lifecycle("sweeper", s.cfg.Group, started, closed); err != nil {
		return err
	}
	if err := s.chk.Ping(ctx); err != nil {
		return fmt.Errorf("rocketmq: sweeper of group %q: barrier: %w", s.cfg.Group, err)
	}
	if _, err := s.cfg.askNameServers(ctx, []string{s.cfg.brokerTopic(CheckMaxTimeTopic)}); err != nil {
		return fmt.Errorf("rocketmq: sweeper of group %q: %w", s.cfg.Group, err)
	}
	return nil
}

// awaitTopic starts the consumer once CheckMaxTimeTopic exists.
func (s *Sweeper) awaitTopic() {
	defer s.wg.Done()
	tick := time.NewTicker(topicRetryEvery)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	unreachable := false // warned that no name server answers
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		a, err := s.cfg.askNameServers(ctx, []string{s.cfg.brokerTopic(CheckMaxTimeTopic)})
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if !unreachable {
				s.log.Warn("waiting for "+CheckMaxTimeTopic+"; will retry", "err", err)
				unreachable = true
			}
			continue
		case unreachable:
			s.log.Info("a name server answers again", "name_server", a.addr)
			unreachable = false
		}
		if len(a.missing) > 0 {
			continue
		}
		pc, missing, err := s.startConsumer()
		if err != nil {
			if !missing {
				s.log.Warn("cannot start the sweeper's consumer; will retry", "err", err)
			}
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = shutdownConsumer(pc, s.log)
			return
		}
		s.run(pc)
		s.mu.Unlock()
		s.log.Info("sweeping " + CheckMaxTimeTopic)
		return
	}
}

// run keeps the started consumer pc and watches the brokers of
// CheckMaxTimeTopic, as a Consumer does: after a broker restart the
// sweeper pulls again within seconds, instead of about 33 s after the
// broker died. Called with s.mu held.
func (s *Sweeper) run(pc rmq.PushConsumer) {
	s.pc = pc
	s.rc = watchConsumerBrokers(pc, &s.cfg.Conn, s.log, []string{s.cfg.brokerTopic(CheckMaxTimeTopic)})
	if s.rc != nil {
		s.rc.stuck = expireStuckPulls(pc, s.log, &s.expired)
	}
	s.rc.start()
}

// Close stops consuming. A half message being swept is either finished or
// left unacknowledged for the next sweeper.
func (s *Sweeper) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	beat := s.beat
	s.mu.Unlock()
	beat.Stop(ctx)
	s.wg.Wait()
	s.mu.Lock()
	pc, rc := s.pc, s.rc
	s.mu.Unlock()
	if pc == nil {
		return nil
	}
	rc.close()
	if err := shutdownConsumer(pc, s.log); err != nil {
		return fmt.Errorf("rocketmq: sweeper shutdown: %w", err)
	}
	return nil
}

func (s *Sweeper) consume(ctx context.Context, msgs ...*primitive.MessageExt) (result consumer.ConsumeResult, err error) {
	if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok && s.cfg.RetryDelayLevel > 0 {
		cc.DelayLevelWhenNextConsume = s.cfg.RetryDelayLevel
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic while sweeping; will retry", "panic", r, "stack", string(debug.Stack()))
			result, err = consumer.ConsumeRetryLater, nil
		}
	}()
	for _, ext := range msgs {
		if !s.sweepWithRetry(ctx, ext) {
			return consumer.ConsumeRetryLater, nil
		}
	}
	return consumer.ConsumeSuccess, nil
}

// sweep's verdicts on one half message.
type verdict int

const (
	swept      verdict = iota // done: it may be acknowledged
	retry                     // the database or the republish failed: try again
	brokerAway                // the republish failed because the broker or the route to it is unavailable: try again
	handBack                  // keep it on the broker; retrying now is no use
)

// sweepWithRetry retries one half message in-process for up to HoldFor:
// a broker redelivery would wait for the retry topic's delay instead.
// Past HoldFor it hands the message back unless the barrier's database
// does not answer, or the republish failed because the broker or the route
// to it is unavailable ([txmsg.IsUnavailable]): then it goes on holding
// until the database answers or the broker takes the event (see
// SweeperConfig.HoldFor). While it holds for the broker it retries at
// least every 10 s, and at once when the publisher, a
// [txmsg.BrokerReturnNotifier], tells that a broker came back.
func (s *Sweeper) sweepWithRetry(ctx context.Context, ext *primitive.MessageExt) bool {
	deadline := time.Now().Add(s.cfg.HoldFor)
	wait := 500 * time.Millisecond
	dbOutage, brokerOutage := false, false
	var returned <-chan struct{} // a broker's return, once holding for the broker
	for {
		v := s.sweep(ctx, ext)
		switch v {
		case swept:
			return true
		case handBack:
			return false
		}
		if time.Now().Add(wait).After(deadline) {
			if v == brokerAway {
				if !brokerOutage {
					brokerOutage = true
					s.log.Warn("the broker does not take the republished event; holding the discarded half message past HoldFor until it does",
						"txmsg_id", ext.GetProperty(txmsg.PropertyID), "topic", ext.GetProperty(txmsg.PropertyTopic))
					if n, ok := s.pub.(txmsg.BrokerReturnNotifier); ok {
						ch, stop := n.NotifyBrokerReturn()
						defer stop()
						returned = ch
					}
				}
			} else {
				perr := checkerDown(ctx, s.chk)
				if perr == nil {
					s.log.Info("handing the discarded half message back to the broker for a later delivery",
						"txmsg_id", ext.GetProperty(txmsg.PropertyID), "held_for", s.cfg.HoldFor, "redeliveries_so_far", ext.ReconsumeTimes)
					return false
				}
				if !dbOutage {
					dbOutage = true
					s.log.Warn("the barrier's database does not answer; holding the discarded half message past HoldFor until it does",
						"txmsg_id", ext.GetProperty(txmsg.PropertyID), "probe_err", perr)
				}
			}
		}
		select {
		case <-s.done:
			return false
		case <-ctx.Done():
			return false
		case <-returned:
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// sweep handles one discarded half message.
func (s *Sweeper) sweep(ctx context.Context, ext *primitive.MessageExt) verdict {
	if !s.groups[ext.GetProperty(primitive.PropertyProducerGroup)] {
		return swept
	}
	id := ext.GetProperty(txmsg.PropertyID)
	realTopic := ext.GetProperty(txmsg.PropertyTopic)
	if id == "" || realTopic == "" {
		s.log.Warn("discarded half message without a txmsg ID or real topic; leaving it", "broker_msg_id", ext.MsgId)
		return swept
	}
	log := s.log.With("txmsg_id", id, "topic", realTopic)
	if ext.Queue != nil {
		log = log.With("broker", ext.Queue.BrokerName) // the broker that discarded it
	}
	state, err := s.chk.ResolveSince(ctx, id, bornAt(ext))
	if errors.Is(err, checker.ErrBeyondPurgeHorizon) {
		return s.hold(ctx, ext, id, realTopic, err)
	}
	if err != nil {
		log.Warn("discarded half message: barrier unreachable; will retry", "err", err)
		return retry
	}
	log = log.With("state", state.String())
	if state != txmsg.StateCommitted {
		log.Info("discarded half message was rolled back; dropping it")
		return swept
	}
	m := fromExt(ext).Message
	m.ID, m.Topic = id, realTopic
	if err := s.republish(ctx, ext, m); err != nil {
		s.counts.Failed()
		log.Warn("discarded half message was committed; republishing failed, will retry", "err", err)
		if txmsg.IsUnavailable(err) {
			return brokerAway
		}
		return retry
	}
	s.counts.Swept()
	log.Info("discarded half message was committed; republished it")
	return swept
}

// republish sends a committed discarded half message where it belongs: a
// delayed one that is not due yet back to the delay topic it was sent to
// (its broker REAL_TOPIC), for a Forwarder to send on when due, when pub
// is a [*Publisher]; any other to its topic now.
func (s *Sweeper) republish(ctx context.Context, ext *primitive.MessageExt, m *txmsg.Message) error {
	return sendAgain(ctx, s.pub, ext.GetProperty(primitive.PropertyRealTopic), m)
}

// sendAgain publishes m again through pub: a delayed message that is not
// due yet goes to delayTopic, as a Transactional producer sends it, for a
// [Forwarder] to send on at its due time; any other goes to its topic at
// once. A delayed message is never sent early: without a [Publisher] to
// send it to the delay topic, sendAgain fails.
func sendAgain(ctx context.Context, pub txmsg.Publisher, delayTopic string, m *txmsg.Message) error {
	if !m.DeliverAt.After(time.Now()) || delayTopic == "" || delayTopic == m.Topic {
		return pub.Publish(ctx, m)
	}
	p, ok := pub.(*Publisher)
	if !ok {
		return fmt.Errorf("%w: delayed message %s is due at %s and the publisher (%T) cannot send it to the delay topic %s: give a txrmq.Publisher",
			txmsg.ErrInvalidConfig, m.ID, m.DeliverAt.UTC().Format(time.RFC3339), pub, delayTopic)
	}
	pm := toPrimitive(m)
	pm.Topic = delayTopic
	return p.sendOne(ctx, pm)
}

// hold keeps a half message whose outcome the barrier can no longer tell:
// it is parked for an operator, or left on the broker.
func (s *Sweeper) hold(ctx context.Context, ext *primitive.MessageExt, id, realTopic string, cause error) verdict {
	driver.Held(s.cfg.Hooks, s.cfg.Group, id, realTopic, cause)
	r := fromExt(ext)
	r.Message.ID, r.Message.Topic = id, realTopic
	r.Attempt = int(ext.ReconsumeTimes) + 1
	if err := driver.Park(s.cfg.Parked, ctx, s.cfg.Group, r, cause); err != nil {
		s.log.Error("discarded half message is older than the barrier's purge horizon, so whether it committed is unknown; "+
			"parking it failed, leaving it on the broker", "txmsg_id", id, "topic", realTopic, "err", cause, "park_err", err)
		return handBack
	}
	s.counts.Parked()
	_, table := s.cfg.Parked.Tables()
	s.log.Error("discarded half message is older than the barrier's purge horizon, so whether it committed is unknown; "+
		"parked it for an operator (txmsgctl parked list -kind consumer -group "+s.cfg.Group+")",
		"txmsg_id", id, "topic", realTopic, "parked_table", table, "err", cause)
	return swept
}

// bornAt is when the producer sent the half message, by its own clock:
// before its local transaction wrote the barrier row.
func bornAt(ext *primitive.MessageExt) time.Time {
	if ext.BornTimestamp <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ext.BornTimestamp)
}

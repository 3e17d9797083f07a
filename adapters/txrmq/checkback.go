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
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// How the client delivers check-backs, in the pinned rocketmq-client-go:
//
// A broker sends CHECK_TRANSACTION_STATE to one live producer connection of
// the half message's producer group. The client (one per instance name)
// handles each request on a new goroutine, which decodes the half message
// and sends it on the callback channel of the first producer created with
// that instance name: an unbuffered channel. Only a transaction producer
// reads that channel, with one goroutine that calls CheckLocalTransaction
// and sends END_TRANSACTION with its answer, one check-back at a time.
//
// So, left alone: a check-back that reaches a plain producer leaves its
// goroutine blocked forever and is never answered; check-backs that arrive
// while the answers are slow pile up as blocked goroutines without bound;
// and the reading goroutine never ends, because the client never closes the
// channel.
//
// checkBacks takes over the channel. Each txmsg producer builds, on one
// client instance, a first producer that is never started (its channel is
// the one the client writes to, read here at once) and then the
// transaction producer that sends. A bounded queue feeds a few workers
// that resolve check-backs from the barrier; a check-back that finds the
// queue full is answered UNKNOWN at once (not answered: the broker asks
// again at its next check). A COMMIT or ROLLBACK goes to the transaction
// producer's own channel, whose reader sends it with END_TRANSACTION.
// Close ends all of these goroutines, the client's reader included.

// finishQuiet and finishMax bound how long Close keeps draining the
// client's check-back channel after the client has shut down.
const (
	finishQuiet = 100 * time.Millisecond
	finishMax   = 2 * time.Second
)

// closeBarrierWait bounds how long Close waits for the client's reader to
// finish the END_TRANSACTION in hand.
const closeBarrierWait = 5 * time.Second

// Defaults for check-back answering.
const (
	DefaultCheckBackWorkers = 4
	DefaultCheckBackQueue   = 1024
)

// ErrCheckBackOverload is the error passed to the CheckBack hooks for a
// check-back answered UNKNOWN because CheckBackQueue check-backs were
// already waiting.
var ErrCheckBackOverload = errors.New("rocketmq: too many check-backs waiting; answered UNKNOWN, the broker asks again")

// ErrNoChecker is the error passed to the CheckBack hooks for a check-back
// that reached a Publisher without a Checker.
var ErrNoChecker = errors.New("rocketmq: check-back reached a publisher without a Checker; answered UNKNOWN")

// checkBackLimits are the knobs both producer configs carry.
type checkBackLimits struct {
	workers, queue int
}

// checkBackDefaults returns CheckBackWorkers and CheckBackQueue with the
// zero ones set to their defaults.
func checkBackDefaults(workers, queue int) (int, int) {
	if workers == 0 {
		workers = DefaultCheckBackWorkers
	}
	if queue == 0 {
		queue = DefaultCheckBackQueue
	}
	return workers, queue
}

// validateCheckBackLimits checks a producer config's defaulted
// CheckBackWorkers and CheckBackQueue.
func validateCheckBackLimits(what string, workers, queue int) error {
	if workers <= 0 {
		return fmt.Errorf("%w: %s: CheckBackWorkers must be positive (0 means %d)", txmsg.ErrInvalidConfig, what, DefaultCheckBackWorkers)
	}
	if queue <= 0 {
		return fmt.Errorf("%w: %s: CheckBackQueue must be positive (0 means %d)", txmsg.ErrInvalidConfig, what, DefaultCheckBackQueue)
	}
	return nil
}

// checkBacks answers one producer's check-backs; see the comment above.
type checkBacks struct {
	log    *slog.Logger
	hooks  txmsg.Hooks
	group  string // the producer group, for the hooks
	limits checkBackLimits
	// answer resolves one check-back; nil answers UNKNOWN with a warning.
	// It must honour ctx, which ends at Close.
	answer func(ctx context.Context, ext *primitive.MessageExt) primitive.LocalTransactionState

	in  chan interface{} // the client writes check-backs here
	out chan interface{} // the transaction producer's reader sends answers from here

	queue   chan interface{}
	answers sync.Map // *primitive.MessageExt → primitive.LocalTransactionState

	ctx    context.Context // ends at stopWorkers
	cancel context.CancelFunc
	stopIn chan struct{} // closed to stop the reader of in
	readWG sync.WaitGroup
	workWG sync.WaitGroup

	// closing is closed when the owner's Close begins, released when the
	// client has shut down; an answer reaching the client in between
	// waits (see hold).
	closing  chan struct{}
	released chan struct{}

	dropped   atomic.Int64
	lastWarn  atomic.Int64 // unix nanoseconds of the last overload warning
	lastRead  atomic.Int64 // unix nanoseconds of the reader's last request
	startOnce sync.Once
	// loopStarted: the transaction producer's reader of out runs (start
	// is called just before the client starts it).
	loopStarted atomic.Bool
	stopOnce    sync.Once
	closed      atomic.Bool
}

// newCheckBackProducer builds the transaction producer a txmsg producer
// sends through, with cb in front of its check-backs. If the client's
// fields are not what this version expects, it returns a plain
// transaction producer whose check-backs call cb.answer one at a time, and
// says so in the log.
func newCheckBackProducer(cfg producerSetup, kind string, cb *checkBacks, l primitive.TransactionListener) (rmq.TransactionProducer, error) {
	opts := producerOptions(cfg, kind) // one instance name for both producers below
	first, err := producer.NewDefaultProducer(opts...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new %s producer: %w", kind, err)
	}
	tp, err := producer.NewTransactionProducer(l, opts...)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new %s producer: %w", kind, err)
	}
	in, inClient, err1 := clientinternals.CallbackChannel(first)
	out, outClient, err2 := clientinternals.CallbackChannel(tp)
	switch {
	case err1 != nil || err2 != nil:
		cb.log.Warn("cannot take over the client's check-back channel; check-backs are answered one at a time by the client", "err", errors.Join(err1, err2))
	case inClient != outClient:
		cb.log.Warn("the two producers do not share one client; check-backs are answered one at a time by the client")
	default:
		cb.in, cb.out = in, out
	}
	return tp, nil
}

func newCheckBacks(log *slog.Logger, hooks txmsg.Hooks, group string, limits checkBackLimits,
	answer func(ctx context.Context, ext *primitive.MessageExt) primitive.LocalTransactionState) *checkBacks {
	ctx, cancel := context.WithCancel(context.Background())
	return &checkBacks{log: log, hooks: hooks, group: group, limits: limits, answer: answer, ctx: ctx, cancel: cancel,
		stopIn: make(chan struct{}), closing: make(chan struct{}), released: make(chan struct{}),
		queue: make(chan interface{}, limits.queue)}
}

// start starts the reader and the workers, once; call it before the
// client starts.
func (cb *checkBacks) start() {
	if cb.in == nil {
		return
	}
	cb.startOnce.Do(func() {
		cb.loopStarted.Store(true)
		cb.readWG.Add(1)
		go cb.read()
		if cb.answer == nil {
			return
		}
		for i := 0; i < cb.limits.workers; i++ {
			cb.workWG.Add(1)
			go cb.work()
		}
	})
}

// read takes every check-back off the client's channel at once, so no
// client goroutine waits, and queues it or answers UNKNOWN.
func (cb *checkBacks) read() {
	defer cb.readWG.Done()
	for {
		var v interface{}
		select {
		case <-cb.stopIn:
			return
		case v = <-cb.in:
		}
		cb.lastRead.Store(time.Now().UnixNano())
		ext := clientinternals.CheckBackMessage(v)
		if ext == nil {
			continue
		}
		id := ext.GetProperty(txmsg.PropertyID)
		if cb.answer == nil {
			cb.log.Warn("check-back reached a publisher without a Checker; answering UNKNOWN. "+
				"Give PublisherConfig a Checker, or use a producer group of its own for this publisher",
				"txmsg_id", id, "topic", ext.Topic, "broker_msg_id", ext.MsgId)
			driver.CheckBack(cb.hooks, cb.group, id, ext.Topic, txmsg.StateUnknown, ErrNoChecker, 0)
			continue
		}
		select {
		case <-cb.closing:
			// The answer could not be sent any more; the broker asks
			// another producer of the group later.
			continue
		default:
		}
		ext.Body = nil // the answer needs the properties only
		select {
		case cb.queue <- v:
		default:
			cb.overloaded(id, ext.Topic)
		}
	}
}

func (cb *checkBacks) overloaded(id, topic string) {
	n := cb.dropped.Add(1)
	driver.CheckBack(cb.hooks, cb.group, id, topic, txmsg.StateUnknown, ErrCheckBackOverload, 0)
	now := time.Now().UnixNano()
	last := cb.lastWarn.Load()
	if now-last >= int64(10*time.Second) && cb.lastWarn.CompareAndSwap(last, now) {
		cb.log.Warn("check-backs arrive faster than the barrier answers them; answering UNKNOWN, the broker asks again",
			"queue", cb.limits.queue, "workers", cb.limits.workers, "unknown_so_far", n, "txmsg_id", id)
	}
}

// work resolves queued check-backs and hands COMMIT and ROLLBACK to the
// transaction producer's reader. UNKNOWN needs no answer: the broker
// ignores it and asks again.
func (cb *checkBacks) work() {
	defer cb.workWG.Done()
	for {
		var v interface{}
		select {
		case <-cb.ctx.Done():
			return
		case v = <-cb.queue:
		}
		ext := clientinternals.CheckBackMessage(v)
		state := cb.answer(cb.ctx, ext)
		if state == primitive.UnkonwnState {
			continue
		}
		cb.answers.Store(ext, state)
		select {
		case cb.out <- v:
		case <-cb.ctx.Done():
			cb.answers.Delete(ext)
			return
		}
	}
}

// check is the listener's CheckLocalTransaction: it returns the answer a
// worker prepared or, when the channel could not be taken over, resolves
// here.
func (cb *checkBacks) check(ext *primitive.MessageExt) (state primitive.LocalTransactionState) {
	if cb.in == nil {
		// The client resolves here and answers right after: hold that
		// answer while Close shuts the client down. With the channel
		// taken over, stopWorkers' close barrier orders it instead.
		defer cb.hold()
	}
	defer func() {
		if r := recover(); r != nil {
			cb.log.Error("panic while answering a check-back; answering UNKNOWN", "panic", r, "stack", string(debug.Stack()))
			state = primitive.UnkonwnState
		}
	}()
	if cb.in != nil {
		if s, ok := cb.answers.LoadAndDelete(ext); ok {
			return s.(primitive.LocalTransactionState)
		}
		return primitive.UnkonwnState
	}
	if cb.answer == nil {
		cb.log.Warn("check-back reached a publisher without a Checker; answering UNKNOWN", "txmsg_id", ext.GetProperty(txmsg.PropertyID))
		driver.CheckBack(cb.hooks, cb.group, ext.GetProperty(txmsg.PropertyID), ext.Topic, txmsg.StateUnknown, ErrNoChecker, 0)
		return primitive.UnkonwnState
	}
	return cb.answer(cb.ctx, ext)
}

// hold keeps an answer from being sent while Close shuts the client down:
// the client's shutdown and its answering goroutine touch the same state
// without synchronisation. After the shutdown the answer is dropped, and
// the broker asks another producer of the group.
func (cb *checkBacks) hold() {
	select {
	case <-cb.closing:
		<-cb.released
	default:
	}
}

// beginClose marks the start of the owner's Close.
func (cb *checkBacks) beginClose() {
	if cb.closed.CompareAndSwap(false, true) {
		close(cb.closing)
	}
}

// stopWorkers ends the workers and in-flight resolutions, and closes the
// transaction producer's channel, which ends its reader once the answer it
// may hold is done. Call it before the client shuts down.
func (cb *checkBacks) stopWorkers() {
	cb.cancel()
	cb.workWG.Wait()
	if cb.out != nil {
		cb.stopOnce.Do(func() {
			// The client's reader sends END_TRANSACTION after each answer,
			// with nothing ordering that send before the client's
			// shutdown. It takes the barrier only once that send is done,
			// and the send of the barrier completes only when it is taken.
			if cb.loopStarted.Load() {
				select {
				case cb.out <- rmqlog.CloseBarrier{}:
				case <-time.After(closeBarrierWait):
					cb.log.Warn("the client's check-back reader did not take the close barrier; shutting down anyway")
				}
			}
			close(cb.out)
		})
	}
}

// finish ends the reader of the client's channel, after the client has
// shut down, and releases answers held by hold. A request the client
// received just before its shutdown is handled on a goroutine of its own
// that may not have reached the channel yet; left unread it would block
// forever. So the reader keeps draining (and dropping: the broker asks
// another producer of the group) until it has seen nothing for
// finishQuiet, at most finishMax.
func (cb *checkBacks) finish() {
	if cb.in != nil {
		deadline := time.Now().Add(finishMax)
		for time.Now().Before(deadline) && time.Since(time.Unix(0, cb.lastRead.Load())) < finishQuiet {
			time.Sleep(finishQuiet / 4)
		}
	}
	select {
	case <-cb.stopIn:
	default:
		close(cb.stopIn)
	}
	cb.readWG.Wait()
	select {
	case <-cb.released:
	default:
		close(cb.released)
	}
}

// resolveFromBarrier answers one check-back from the barrier table.
func resolveFromBarrier(ctx context.Context, chk *checker.Checker, log *slog.Logger, hooks txmsg.Hooks, group string, ext *primitive.MessageExt) primitive.LocalTransactionState {
	id := ext.GetProperty(txmsg.PropertyID)
	if id == "" {
		log.Warn("check-back for a half message without a txmsg ID; answering UNKNOWN", "broker_msg_id", ext.MsgId, "topic", ext.Topic)
		return primitive.UnkonwnState
	}
	start := time.Now()
	state, err := chk.ResolveSince(ctx, id, bornAt(ext)) // bounded by the checker's ResolveTimeout
	driver.CheckBack(hooks, group, id, ext.Topic, state, err, time.Since(start))
	if errors.Is(err, checker.ErrBeyondPurgeHorizon) {
		log.Error("check-back for a transaction older than the barrier's purge horizon; answering UNKNOWN. "+
			"After transactionCheckMax checks the broker moves it to "+CheckMaxTimeTopic+", where the sweeper parks it for an operator",
			"txmsg_id", id, "topic", ext.Topic, "err", err)
		return primitive.UnkonwnState
	}
	if err != nil {
		log.Warn("check-back unresolved; answering UNKNOWN, the broker will ask again", "txmsg_id", id, "topic", ext.Topic, "err", err)
		return primitive.UnkonwnState
	}
	log.Debug("check-back answered", "txmsg_id", id, "topic", ext.Topic, "state", state.String())
	return toPrimitiveState(state)
}

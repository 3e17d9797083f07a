package clientinternals

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// ConsumerClient is the part of the client's internal RMQClient that a
// consumer's start-up uses.
type ConsumerClient interface {
	UpdateTopicRouteInfo()
	RebalanceImmediately()
}

// ConsumerClientOf returns the client behind a push consumer (the value
// rmq.NewPushConsumer returned), or nil when it cannot be reached.
func ConsumerClientOf(pc any) (cl ConsumerClient) {
	cl, _ = consumerClient(pc)
	return cl
}

func consumerClient(pc any) (cl ConsumerClient, err error) {
	defer guard(&err)
	c, err := clientOf(reflect.ValueOf(pc)) // promoted from the embedded *defaultConsumer
	if err != nil {
		return nil, err
	}
	cl, ok := c.Interface().(ConsumerClient)
	if !ok {
		return nil, errors.New("client lacks UpdateTopicRouteInfo/RebalanceImmediately")
	}
	if _, ok := pc.(interface{ IsSubscribeTopicNeedUpdate(string) bool }); !ok {
		return nil, errors.New("push consumer lacks IsSubscribeTopicNeedUpdate")
	}
	return cl, nil
}

// Names of what ReleaseQueues reaches.
const (
	fieldQueueTable = "processQueueTable" // *defaultConsumer (promoted): sync.Map, primitive.MessageQueue → *processQueue
	fieldPause      = "pause"             // *defaultConsumer (promoted): *atomic.Bool, read by every pull loop and rebalance
	fieldRequestPQ  = "pq"                // consumer.PullRequest: *processQueue
)

// dropper is the part of the client's *processQueue that ReleaseQueues
// uses. Dropping a queue closes its closeChan, so a pull that returns
// afterwards stores nothing, and its pull loop and consume loop end.
type dropper interface{ WithDropped(bool) }

// pauser is the client's *atomic.Bool (go.uber.org/atomic).
type pauser interface {
	Store(bool)
	Load() bool
}

// queueParts are what ReleaseQueues needs of a consumer.
type queueParts struct {
	table     *sync.Map
	pause     pauser
	rebalance interface{ RebalanceIfNotPaused() }        // the client's: takes its rebalance lock
	persist   interface{ PersistConsumerOffset() error } // the consumer's
}

func queuePartsOf(c any) (queueParts, error) {
	var p queueParts
	v := reflect.ValueOf(c)
	t, err := field(v, fieldQueueTable)
	if err != nil {
		return p, err
	}
	var ok bool
	if p.table, ok = t.Addr().Interface().(*sync.Map); !ok {
		return p, fmt.Errorf("%s.%s is %s, not sync.Map", v.Type(), fieldQueueTable, t.Type())
	}
	pf, err := field(v, fieldPause)
	if err != nil {
		return p, err
	}
	if pf.Kind() != reflect.Pointer || pf.IsNil() {
		return p, fmt.Errorf("%s.%s is not a non-nil pointer", v.Type(), fieldPause)
	}
	if p.pause, ok = pf.Interface().(pauser); !ok {
		return p, fmt.Errorf("%s.%s is %s, without Store(bool) and Load() bool", v.Type(), fieldPause, pf.Type())
	}
	cl, err := clientOf(v)
	if err != nil {
		return p, err
	}
	if p.rebalance, ok = cl.Interface().(interface{ RebalanceIfNotPaused() }); !ok {
		return p, errors.New("client lacks RebalanceIfNotPaused")
	}
	if p.persist, ok = c.(interface{ PersistConsumerOffset() error }); !ok {
		return p, fmt.Errorf("%T lacks PersistConsumerOffset", c)
	}
	return p, nil
}

// ReleaseQueues makes a started consumer (a push or a pull consumer, as
// the client's constructors return them) stop pulling and give up every
// message queue it holds, as the client's rebalance gives up a queue that
// moved to another consumer: each process queue is dropped, the consumed
// offsets are saved to the broker, and the queues leave the consumer's
// table. It returns how many queues were released.
//
// Why: the client's Shutdown closes the message channel of every process
// queue in its table, while a pull whose request was in flight (a broker
// long poll lasts up to 20 s) may still come back with messages and send
// them on that channel: a data race, and a "send on closed channel" panic
// when the send comes second. Pausing stops new pulls; a pull in flight
// on a dropped queue stores nothing and sends on a channel nobody closes;
// and a queue no longer in the table is not closed by Shutdown. Waiting
// for the in-flight pulls instead would make every Close wait out a long
// poll.
//
// Call Shutdown next, and never resume the consumer: the paused flag stays
// set. The flag is set first, then the client's rebalance lock is taken
// once, so a rebalance under way has stored its queues in the table before
// the table is read, and a later rebalance happens after the flag was set:
// the client's own ones then do nothing, and a queue the one it starts in
// the background at Start may still add has a pull loop that sees the flag
// before its first pull. Shutdown closes that queue's channel, on which
// nothing was ever sent.
func ReleaseQueues(c any) (n int, err error) {
	defer guard(&err)
	p, err := queuePartsOf(c)
	if err != nil {
		return 0, err
	}
	p.pause.Store(true)
	p.rebalance.RebalanceIfNotPaused()
	var keys []any
	var queues []dropper
	p.table.Range(func(k, v any) bool {
		d, ok := v.(dropper)
		if !ok {
			err = fmt.Errorf("process queue %T lacks WithDropped(bool)", v)
			return false
		}
		keys, queues = append(keys, k), append(queues, d)
		return true
	})
	if err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, nil
	}
	for _, d := range queues {
		d.WithDropped(true)
	}
	// After dropping: the client records no consumed offset for a dropped
	// queue, so what is saved here is final.
	err = p.persist.PersistConsumerOffset()
	for _, k := range keys {
		p.table.Delete(k)
	}
	if err != nil {
		return len(keys), fmt.Errorf("save consumed offsets: %w", err)
	}
	return len(keys), nil
}

// fieldRebalanceLock is the client's (*rmqClient) sync.Mutex that its
// RebalanceImmediately and RebalanceIfNotPaused hold while they run.
const fieldRebalanceLock = "rbMutex"

// RebalanceLockOf returns the rebalance lock of the client behind a push
// or a pull consumer (as the client's constructors return them).
//
// Why: Start runs a rebalance in a goroutine of its own
// (RebalanceImmediately, which does not look at the paused flag), and
// every request it sends reads the client's closed flag, which the
// client's Shutdown sets without synchronisation: a data race when Close
// follows Start closely. Holding this lock across Shutdown, such a
// rebalance either ends before Shutdown begins or begins after it has
// ended, and finds the client closed. Nothing in the client's Shutdown
// takes the lock. Take it after ReleaseQueues, which takes it too.
func RebalanceLockOf(c any) (mu *sync.Mutex, err error) {
	defer guard(&err)
	f, err := clientField(c, fieldRebalanceLock)
	if err != nil {
		return nil, err
	}
	mu, ok := f.Addr().Interface().(*sync.Mutex)
	if !ok {
		return nil, fmt.Errorf("the client's %s is %s, not sync.Mutex", fieldRebalanceLock, f.Type())
	}
	return mu, nil
}

// fieldLastPullTime is the *processQueue's time of the last pull a pull
// loop started (an atomic.Value holding a time.Time). The push consumer's
// rebalance drops and re-creates a queue whose last pull is older than the
// client's _PullMaxIdleTime (120 s), with a new pull loop.
const fieldLastPullTime = "lastPullTime"

// pullExpiredAge is stored as a queue's last pull time to make it count as
// expired: far beyond the client's 120 s.
const pullExpiredAge = time.Hour

// atomicValue is the client's atomic.Value (go.uber.org/atomic's, which
// embeds sync/atomic's).
type atomicValue interface {
	Load() any
	Store(any)
}

// lastPullTimeOf returns the lastPullTime of a *processQueue.
func lastPullTimeOf(pq any) (atomicValue, error) {
	f, err := field(reflect.ValueOf(pq), fieldLastPullTime)
	if err != nil {
		return nil, err
	}
	v, ok := f.Addr().Interface().(atomicValue)
	if !ok {
		return nil, fmt.Errorf("%T.%s is %s, without Load and Store", pq, fieldLastPullTime, f.Type())
	}
	if held := v.Load(); held != nil {
		if _, ok := held.(time.Time); !ok {
			return nil, fmt.Errorf("%T.%s holds %T, not time.Time", pq, fieldLastPullTime, held)
		}
	}
	return v, nil
}

// ExpirePulls marks process queues of a started push consumer (the value
// rmq.NewPushConsumer returned) as ones whose pull expired, and returns how
// many it marked: for each broker name in stuck, the queues of that broker
// whose last pull started before the time given (when the broker was seen
// gone). Those pulls were sent on the connection the broker's death
// closed. The consumer's next rebalance drops each marked queue (saving its
// consumed offset) and re-creates it at once with a new pull loop, starting
// from the saved offset; the old loop ends when its pull returns.
//
// Why: the client's pull is a long poll with a fixed 30 s timeout, and when
// a broker dies the client drops the connection without failing the pulls
// in flight on it. A pull sent before a broker crash waits out those 30 s
// (and 3 s more after its error) before its queue pulls again, however
// soon the broker is back. A queue that pulled after the broker was gone
// got an error at once and retries within 3 s on its own: it is left
// alone. Call ExpirePulls when a broker came back, then rebalance.
//
// Messages of a dropped queue that were being handled are handled again
// (their offsets are no longer recorded), as after any rebalance that
// moves a queue. Only the push consumer re-creates expired queues: for a
// pull consumer the marks change nothing.
func ExpirePulls(pc any, stuck map[string]time.Time) (n int, err error) {
	defer guard(&err)
	if len(stuck) == 0 {
		return 0, nil
	}
	f, err := field(reflect.ValueOf(pc), fieldQueueTable)
	if err != nil {
		return 0, err
	}
	table, ok := f.Addr().Interface().(*sync.Map)
	if !ok {
		return 0, fmt.Errorf("%T.%s is %s, not sync.Map", pc, fieldQueueTable, f.Type())
	}
	expired := time.Now().Add(-pullExpiredAge)
	err = rangeStuck(table, stuck, func(_, _ any, last atomicValue) error {
		last.Store(expired)
		n++
		return nil
	})
	return n, err
}

// rangeStuck calls fn for each queue of table whose broker is in stuck and
// whose last pull started before the time stuck gives for that broker,
// with the queue's key, its process queue and its last-pull time; it stops
// at the first error.
func rangeStuck(table *sync.Map, stuck map[string]time.Time, fn func(k, pq any, last atomicValue) error) (err error) {
	table.Range(func(k, v any) bool {
		mq, ok := k.(primitive.MessageQueue)
		if !ok {
			err = fmt.Errorf("process queue table key %T is not primitive.MessageQueue", k)
			return false
		}
		gone, ok := stuck[mq.BrokerName]
		if !ok {
			return true
		}
		var last atomicValue
		if last, err = lastPullTimeOf(v); err != nil {
			return false
		}
		if at, _ := last.Load().(time.Time); at.IsZero() || !at.Before(gone) {
			return true
		}
		err = fn(k, v, last)
		return err == nil
	})
	return err
}

// RequeueStuck is [ExpirePulls] for a pull consumer (the value
// rmq.NewPullConsumer returned), whose rebalance does not re-create
// expired queues: it gives up the same queues itself, as the client's
// rebalance gives up a queue that moved to another consumer (each is
// dropped, the consumed offsets are saved to the broker, and the queue
// leaves the consumer's table), and returns how many. The consumer's next
// rebalance adds them again, each with a new pull loop that starts from
// the saved offset (or from the broker's older one when the save failed:
// messages are then delivered again, never skipped). A paused consumer
// (released for Shutdown) is left alone.
func RequeueStuck(c any, stuck map[string]time.Time) (n int, err error) {
	defer guard(&err)
	p, err := queuePartsOf(c)
	if err != nil {
		return 0, err
	}
	if len(stuck) == 0 || p.pause.Load() {
		return 0, nil
	}
	var keys []any
	var queues []dropper
	err = rangeStuck(p.table, stuck, func(k, v any, _ atomicValue) error {
		d, ok := v.(dropper)
		if !ok {
			return fmt.Errorf("process queue %T lacks WithDropped(bool)", v)
		}
		keys, queues = append(keys, k), append(queues, d)
		return nil
	})
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	for _, d := range queues {
		d.WithDropped(true)
	}
	// After dropping: the client records no consumed offset for a dropped
	// queue, so what is saved here is what the new pull loop starts from.
	perr := p.persist.PersistConsumerOffset()
	for i, k := range keys {
		// Only the dropped queue: a rebalance may have added its
		// successor meanwhile.
		if p.table.CompareAndDelete(k, queues[i]) {
			n++
		}
	}
	if perr != nil {
		return n, fmt.Errorf("save consumed offsets: %w", perr)
	}
	return n, nil
}

// fieldCachedCount is the *processQueue's count of the messages it holds
// (a *atomic.Int64 of go.uber.org/atomic, updated under the queue's lock).
const fieldCachedCount = "cachedMsgCount"

// Buffered returns how many messages a started push consumer holds in
// memory, pulled and not yet consumed, summed over its queues.
func Buffered(pc any) (n int64, err error) {
	defer guard(&err)
	v := reflect.ValueOf(pc)
	t, err := field(v, fieldQueueTable)
	if err != nil {
		return 0, err
	}
	table, ok := t.Addr().Interface().(*sync.Map)
	if !ok {
		return 0, fmt.Errorf("%s.%s is %s, not sync.Map", v.Type(), fieldQueueTable, t.Type())
	}
	table.Range(func(_, q any) bool {
		var f reflect.Value
		if f, err = field(reflect.ValueOf(q), fieldCachedCount); err != nil {
			return false
		}
		c, ok := f.Interface().(interface{ Load() int64 })
		if !ok || f.IsNil() {
			err = fmt.Errorf("%T.%s is %s, not a non-nil counter with Load() int64", q, fieldCachedCount, f.Type())
			return false
		}
		n += c.Load()
		return true
	})
	return n, err
}

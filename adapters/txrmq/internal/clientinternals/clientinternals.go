// Package clientinternals is the one place where txrmq reaches into the
// unexported state of the pinned rocketmq-client-go version, by reflection
// and unsafe, for what the client offers no public call for:
//
//   - warming a producer's routes, so a restarted transactional producer is
//     known to the brokers (and answers check-backs) before its first send
//     ([WarmTransactionProducer], [WarmProducer], [MissingRoutes]);
//   - waiting for a push consumer's retry-topic route and running one
//     rebalance at Start ([ConsumerClientOf]);
//   - probing routes for health checks ([NameServers],
//     [TransactionProducerNameServers]);
//   - reading check-back requests off the client's channel at once and
//     sending through a transaction producer's inner producer
//     ([CallbackChannel], [InnerProducer], [CheckBackMessage]);
//   - giving up a consumer's queues before its Shutdown, so that Shutdown
//     closes no channel a pull still in flight may send on
//     ([ReleaseQueues]);
//   - refreshing routes and heartbeats at once after a broker dropped the
//     connection or came back ([Refresher]);
//   - re-creating at once, after a broker came back, the queues of a push
//     consumer whose pulls were in flight when it died ([ExpirePulls]; for
//     a pull consumer [RequeueStuck]),
//     and seeing which requests a client still waits for
//     ([PendingRequests], for tests);
//   - recording a new group's start offsets on the broker at Start: the
//     queues a consumer holds, the consumed offsets the client keeps in
//     memory, and requests the client has no public call for
//     ([HeldQueues], [ConsumedOffset], [RaiseConsumedOffset],
//     [ConsumerRequester]).
//
// Every function reports an error (or nil) when the fields or methods it
// needs are not there, never panics, and the callers degrade to the
// client's own schedule. [Check] and [CheckOffsets] walk every path on
// values built by the client's public constructors, without a broker;
// their test fails when an upgrade of the client renames or retypes what
// this package relies on.
package clientinternals

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// RouteProber is the part of the client's name-server registry
// (internal.Namesrvs) that health checks use. Neither method has internal
// types in its signature, so an ordinary interface assertion reaches them.
type RouteProber interface {
	// FetchSubscribeMessageQueues asks the name servers for topic's route,
	// bypassing the client's cache.
	FetchSubscribeMessageQueues(topic string) ([]*primitive.MessageQueue, error)
	// FindBrokerAddrByName returns the master address of a broker the
	// client has learnt of, or "".
	FindBrokerAddrByName(brokerName string) string
}

// ConsumerClient is the part of the client's internal RMQClient that a
// consumer's start-up uses.
type ConsumerClient interface {
	UpdateTopicRouteInfo()
	RebalanceImmediately()
}

// routeWarmer is the part of the client's internal RMQClient that warm-up
// needs.
type routeWarmer interface {
	UpdateTopicRouteInfo()
	SendHeartbeatToAllBrokerWithLock()
}

// Names of the pinned client's unexported fields and methods used here.
const (
	fieldTxInner     = "producer" // *producer.transactionProducer → *defaultProducer
	fieldClient      = "client"   // *defaultProducer, *defaultConsumer (promoted into *pushConsumer) → internal.RMQClient
	methodUpdateInfo = "UpdateTopicPublishInfo"
	methodNeedUpdate = "IsPublishTopicNeedUpdate"
	methodGetNameSrv = "GetNameSrv"
)

// guard turns a panic of reflect into an error.
func guard(err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("rocketmq-client-go internals: %v", v)
	}
}

// field returns v's field name, made readable although unexported. v must
// be a non-nil pointer to a struct.
func field(v reflect.Value, name string) (reflect.Value, error) {
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, fmt.Errorf("%s is not a pointer to a struct", v.Type())
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() {
		return reflect.Value{}, fmt.Errorf("%s has no field %q", v.Type(), name)
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), nil
}

// txInner returns the *defaultProducer inside a transaction producer.
func txInner(txp any) (reflect.Value, error) {
	dp, err := field(reflect.ValueOf(txp), fieldTxInner)
	if err != nil {
		return reflect.Value{}, err
	}
	if dp.Kind() != reflect.Pointer || dp.IsNil() {
		return reflect.Value{}, errors.New("transaction producer's producer field is not a non-nil pointer")
	}
	return dp, nil
}

// clientOf returns the internal.RMQClient held by component's client field.
func clientOf(component reflect.Value) (reflect.Value, error) {
	c, err := field(component, fieldClient)
	if err != nil {
		return reflect.Value{}, err
	}
	if c.Kind() != reflect.Interface || c.IsNil() {
		return reflect.Value{}, fmt.Errorf("%s's client field is not a non-nil interface", component.Type())
	}
	return c, nil
}

// producerParts are what warm-up needs of a *defaultProducer.
type producerParts struct {
	update   reflect.Value // UpdateTopicPublishInfo(topic string, info *internal.TopicPublishInfo)
	infoType reflect.Type  // internal.TopicPublishInfo
	need     reflect.Value // IsPublishTopicNeedUpdate(topic string) bool
	client   routeWarmer
}

func partsOf(dp reflect.Value) (producerParts, error) {
	var p producerParts
	p.update = dp.MethodByName(methodUpdateInfo)
	if !p.update.IsValid() || p.update.Type().NumIn() != 2 || p.update.Type().In(0).Kind() != reflect.String ||
		p.update.Type().In(1).Kind() != reflect.Pointer || p.update.Type().In(1).Elem().Kind() != reflect.Struct {
		return p, fmt.Errorf("producer has no %s(topic string, *info)", methodUpdateInfo)
	}
	p.infoType = p.update.Type().In(1).Elem()
	p.need = dp.MethodByName(methodNeedUpdate)
	if !p.need.IsValid() || p.need.Type().NumIn() != 1 || p.need.Type().In(0).Kind() != reflect.String ||
		p.need.Type().NumOut() != 1 || p.need.Type().Out(0).Kind() != reflect.Bool {
		return p, fmt.Errorf("producer has no %s(topic string) bool", methodNeedUpdate)
	}
	c, err := clientOf(dp)
	if err != nil {
		return p, err
	}
	var ok bool
	if p.client, ok = c.Interface().(routeWarmer); !ok {
		return p, errors.New("client lacks UpdateTopicRouteInfo/SendHeartbeatToAllBrokerWithLock")
	}
	return p, nil
}

// warm marks topics as published to, fetches their routes and sends a
// heartbeat to their brokers.
func (p producerParts) warm(topics []string) {
	for _, topic := range topics {
		// An empty publish entry marks the topic as one the producer
		// publishes to, so the client's route refresh fetches it.
		p.update.Call([]reflect.Value{reflect.ValueOf(topic), reflect.New(p.infoType)})
	}
	p.client.UpdateTopicRouteInfo()
	p.client.SendHeartbeatToAllBrokerWithLock()
}

// WarmTransactionProducer makes a started transaction producer (the value
// rmq.NewTransactionProducer returned) known to the brokers serving
// topics, before it sends anything.
//
// Why: a broker sends check-backs only to producers that have sent it a
// heartbeat, and the client heartbeats only to brokers it learned from the
// routes of topics it has published to. A service restarted after a crash
// would otherwise not answer check-backs for its group until its first
// send plus up to 30 s.
func WarmTransactionProducer(txp any, topics []string) (err error) {
	defer guard(&err)
	dp, err := txInner(txp)
	if err != nil {
		return err
	}
	parts, err := partsOf(dp)
	if err != nil {
		return err
	}
	parts.warm(topics)
	return nil
}

// WarmProducer is [WarmTransactionProducer] for a plain producer (the value
// rmq.NewProducer returned).
func WarmProducer(p any, topics []string) (err error) {
	defer guard(&err)
	parts, err := partsOf(reflect.ValueOf(p))
	if err != nil {
		return err
	}
	parts.warm(topics)
	return nil
}

// MissingRoutes returns the topics the transaction producer has no
// publish route for yet.
func MissingRoutes(txp any, topics []string) (missing []string, err error) {
	defer guard(&err)
	dp, err := txInner(txp)
	if err != nil {
		return nil, err
	}
	parts, err := partsOf(dp)
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		if parts.need.Call([]reflect.Value{reflect.ValueOf(t)})[0].Bool() {
			missing = append(missing, t)
		}
	}
	return missing, nil
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

// NameServers returns the name-server registry of the client behind
// component: a plain producer or a push consumer, as the client's
// constructors return them.
func NameServers(component any) (rp RouteProber, err error) {
	defer guard(&err)
	return nameServers(reflect.ValueOf(component))
}

// TransactionProducerNameServers is [NameServers] for a transaction
// producer.
func TransactionProducerNameServers(txp any) (rp RouteProber, err error) {
	defer guard(&err)
	dp, err := txInner(txp)
	if err != nil {
		return nil, err
	}
	return nameServers(dp)
}

func nameServers(component reflect.Value) (RouteProber, error) {
	c, err := clientOf(component)
	if err != nil {
		return nil, err
	}
	get := c.Elem().MethodByName(methodGetNameSrv)
	if !get.IsValid() || get.Type().NumIn() != 0 || get.Type().NumOut() != 1 {
		return nil, fmt.Errorf("client has no %s()", methodGetNameSrv)
	}
	rp, ok := get.Call(nil)[0].Interface().(RouteProber)
	if !ok {
		return nil, errors.New("name-server registry lacks FetchSubscribeMessageQueues/FindBrokerAddrByName")
	}
	return rp, nil
}

// heartbeater is the client's heartbeat to every broker it knows.
type heartbeater interface {
	SendHeartbeatToAllBrokerWithLock()
}

// Refresher refreshes, from the name servers, the routes of every topic the
// client behind a component publishes to or subscribes to, and sends a
// heartbeat to every broker of those routes: what the client otherwise does
// every 30 s. For a push consumer it then rebalances.
type Refresher func()

// ProducerRefresher returns the [Refresher] of a plain producer (the value
// rmq.NewProducer returned).
func ProducerRefresher(p any) (r Refresher, err error) {
	defer guard(&err)
	parts, err := partsOf(reflect.ValueOf(p))
	if err != nil {
		return nil, err
	}
	return parts.refresh, nil
}

// TransactionProducerRefresher is [ProducerRefresher] for a transaction
// producer.
func TransactionProducerRefresher(txp any) (r Refresher, err error) {
	defer guard(&err)
	dp, err := txInner(txp)
	if err != nil {
		return nil, err
	}
	parts, err := partsOf(dp)
	if err != nil {
		return nil, err
	}
	return parts.refresh, nil
}

func (p producerParts) refresh() {
	p.client.UpdateTopicRouteInfo()
	p.client.SendHeartbeatToAllBrokerWithLock()
}

// ConsumerRefresher is [ProducerRefresher] for a push consumer: route
// refresh, heartbeat, rebalance.
func ConsumerRefresher(pc any) (r Refresher, err error) {
	defer guard(&err)
	cl, err := consumerClient(pc)
	if err != nil {
		return nil, err
	}
	hb, ok := cl.(heartbeater)
	if !ok {
		return nil, errors.New("client lacks SendHeartbeatToAllBrokerWithLock")
	}
	return func() {
		cl.UpdateTopicRouteInfo()
		hb.SendHeartbeatToAllBrokerWithLock()
		cl.RebalanceImmediately()
	}, nil
}

// Check reaches every field and method this package uses, on a
// transaction producer, a plain producer and a push consumer built by the
// client's constructors (started or not), without calling anything that
// talks to the network. It returns the first path that is missing.
func Check(txp, p, pc any) (err error) {
	defer guard(&err)
	dp, err := txInner(txp)
	if err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, err := partsOf(dp); err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, err := nameServers(dp); err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, _, err := CallbackChannel(txp); err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, err := partsOf(reflect.ValueOf(p)); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if _, _, err := CallbackChannel(p); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if _, err := nameServers(reflect.ValueOf(p)); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if _, err := consumerClient(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := TransactionProducerRefresher(txp); err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, err := ProducerRefresher(p); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if _, err := ConsumerRefresher(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := nameServers(reflect.ValueOf(pc)); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := queuePartsOf(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := ExpirePulls(pc, map[string]time.Time{"\x00none": {}}); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := PendingRequests(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := Buffered(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	return nil
}

// fieldCallbackCh is the *defaultProducer's channel of check-back requests:
// the client's check-back handler sends each one there (unbuffered), and
// only a transaction producer's loop reads it.
const fieldCallbackCh = "callbackCh"

// InnerProducer returns the plain producer inside a transaction producer,
// which implements rmq.Producer: sends through it share the transaction
// producer's client, and so its check-back channel.
func InnerProducer(txp any) (p any, err error) {
	defer guard(&err)
	dp, err := txInner(txp)
	if err != nil {
		return nil, err
	}
	return dp.Interface(), nil
}

// CallbackChannel returns the check-back channel of a plain producer, or of
// the producer inside a transaction producer, and its client (compare
// clients to tell whether two producers share one).
func CallbackChannel(producer any) (ch chan interface{}, client any, err error) {
	defer guard(&err)
	v := reflect.ValueOf(producer)
	if inner, ierr := txInner(producer); ierr == nil {
		v = inner
	}
	f, err := field(v, fieldCallbackCh)
	if err != nil {
		return nil, nil, err
	}
	ch, ok := f.Interface().(chan interface{})
	if !ok {
		return nil, nil, fmt.Errorf("%s.%s is %s, not chan interface{}", v.Type(), fieldCallbackCh, f.Type())
	}
	c, err := clientOf(v)
	if err != nil {
		return nil, nil, err
	}
	return ch, c.Interface(), nil
}

// CheckBackMessage returns the half message of one request read off a
// callback channel (the client's *internal.CheckTransactionStateCallback,
// exported field Msg), or nil.
func CheckBackMessage(request interface{}) (ext *primitive.MessageExt) {
	defer func() {
		if recover() != nil {
			ext = nil
		}
	}()
	v := reflect.ValueOf(request)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName("Msg")
	if !f.IsValid() || !f.CanInterface() {
		return nil
	}
	ext, _ = f.Interface().(*primitive.MessageExt)
	return ext
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

// Names of what PendingRequests reaches.
const (
	fieldRemoteClient  = "remoteClient"  // *rmqClient: remote.RemotingClient
	fieldResponseTable = "responseTable" // *remotingClient: sync.Map, opaque (int32) → *ResponseFuture
)

// PendingRequests returns the request numbers (opaques, which only grow) of
// the requests the client behind component (a producer or a consumer, as
// the client's constructors return them) has sent and still waits an
// answer for. A request sent on a connection a broker's death closed stays
// there until its own timeout.
func PendingRequests(component any) (opaques []int32, err error) {
	defer guard(&err)
	c, err := clientOf(reflect.ValueOf(component))
	if err != nil {
		return nil, err
	}
	rc, err := field(c.Elem(), fieldRemoteClient)
	if err != nil {
		return nil, err
	}
	if rc.Kind() != reflect.Interface || rc.IsNil() {
		return nil, fmt.Errorf("client's %s is not a non-nil interface", fieldRemoteClient)
	}
	t, err := field(rc.Elem(), fieldResponseTable)
	if err != nil {
		return nil, err
	}
	table, ok := t.Addr().Interface().(*sync.Map)
	if !ok {
		return nil, fmt.Errorf("%s is %s, not sync.Map", fieldResponseTable, t.Type())
	}
	table.Range(func(k, _ any) bool {
		o, ok := k.(int32)
		if !ok {
			err = fmt.Errorf("%s key %T is not int32", fieldResponseTable, k)
			return false
		}
		opaques = append(opaques, o)
		return true
	})
	return opaques, err
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

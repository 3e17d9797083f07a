package clientinternals

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/require"
)

type listener struct{}

func (listener) ExecuteLocalTransaction(*primitive.Message) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

func (listener) CheckLocalTransaction(*primitive.MessageExt) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

// nowhere is a name server no test reaches: nothing here starts a client.
var nowhere = primitive.NewPassthroughResolver([]string{"127.0.0.1:1"})

// clients builds, without starting them, the three kinds of client txrmq
// uses, through the pinned client's public constructors.
func clients(t *testing.T) (txp, p, pc any) {
	t.Helper()
	tx, err := rmq.NewTransactionProducer(listener{}, producer.WithNsResolver(nowhere), producer.WithGroupName("clientinternals_tx"))
	require.NoError(t, err)
	plain, err := rmq.NewProducer(producer.WithNsResolver(nowhere), producer.WithGroupName("clientinternals_pub"))
	require.NoError(t, err)
	push, err := rmq.NewPushConsumer(consumer.WithNsResolver(nowhere), consumer.WithGroupName("clientinternals_cons"))
	require.NoError(t, err)
	return tx, plain, push
}

// TestPinnedClientHasWhatWeReachFor fails when an upgrade of
// rocketmq-client-go renames, removes or retypes a field or method this
// package reaches by reflection. It needs no broker.
func TestPinnedClientHasWhatWeReachFor(t *testing.T) {
	txp, p, pc := clients(t)
	require.NoError(t, Check(txp, p, pc))

	// The exact shape, field by field, on the concrete types.
	inner := reflect.TypeOf(txp).Elem()
	f, ok := inner.FieldByName(fieldTxInner)
	require.True(t, ok, "%s.%s", inner, fieldTxInner)
	require.Equal(t, reflect.Pointer, f.Type.Kind())
	require.Equal(t, reflect.TypeOf(p), f.Type, "the transaction producer wraps the plain producer type")
	for _, typ := range []reflect.Type{reflect.TypeOf(p).Elem(), reflect.TypeOf(pc).Elem()} {
		f, ok := typ.FieldByName(fieldClient)
		require.True(t, ok, "%s.%s", typ, fieldClient)
		require.Equal(t, reflect.Interface, f.Type.Kind(), "%s.%s", typ, fieldClient)
		require.Equal(t, "RMQClient", f.Type.Name())
	}
	for _, name := range []string{methodUpdateInfo, methodNeedUpdate} {
		_, ok := reflect.TypeOf(p).MethodByName(name)
		require.True(t, ok, "%s.%s", reflect.TypeOf(p), name)
	}

	// What they answer, on clients that were never started.
	missing, err := MissingRoutes(txp, []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, missing, "no route is known before warm-up")
	for _, get := range []func() (RouteProber, error){
		func() (RouteProber, error) { return TransactionProducerNameServers(txp) },
		func() (RouteProber, error) { return NameServers(p) },
		func() (RouteProber, error) { return NameServers(pc) },
	} {
		rp, err := get()
		require.NoError(t, err)
		require.Empty(t, rp.FindBrokerAddrByName("no_such_broker"))
	}
	require.NotNil(t, ConsumerClientOf(pc))
	// Refreshers of clients that were never started: nothing is registered
	// with them, so a refresh has no topic to fetch and no broker to
	// heartbeat, and must return without touching the network.
	for _, get := range []func() (Refresher, error){
		func() (Refresher, error) { return TransactionProducerRefresher(txp) },
		func() (Refresher, error) { return ProducerRefresher(p) },
		func() (Refresher, error) { return ConsumerRefresher(pc) },
	} {
		r, err := get()
		require.NoError(t, err)
		require.NotNil(t, r)
		r()
	}

	// Check-backs: the channel of a plain producer and of a transaction
	// producer's inner one, and the inner producer itself.
	for _, prod := range []any{txp, p} {
		ch, client, err := CallbackChannel(prod)
		require.NoError(t, err)
		require.NotNil(t, ch)
		require.NotNil(t, client)
	}
	innerP, err := InnerProducer(txp)
	require.NoError(t, err)
	require.IsType(t, p, innerP, "the transaction producer wraps the plain producer type")
	_, ok = innerP.(interface {
		SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
	})
	require.True(t, ok, "the inner producer sends")
	cbType, ok := reflect.TypeOf(p).Elem().FieldByName(fieldCallbackCh)
	require.True(t, ok)
	require.Equal(t, reflect.TypeOf((chan interface{})(nil)), cbType.Type)
	ext := &primitive.MessageExt{MsgId: "m"}
	require.Same(t, ext, CheckBackMessage(&struct{ Msg *primitive.MessageExt }{ext}))
	require.Nil(t, CheckBackMessage("not a request"))

	// The ordered consumer reaches the same parts of a pull consumer.
	pull, err := rmq.NewPullConsumer(consumer.WithNsResolver(nowhere), consumer.WithGroupName("clientinternals_pull"))
	require.NoError(t, err)
	_, err = consumerClient(pull)
	require.NoError(t, err, "pull consumer")
	rp, err := NameServers(pull)
	require.NoError(t, err, "pull consumer")
	r, err := ConsumerRefresher(pull)
	require.NoError(t, err, "pull consumer")
	r()
	require.Empty(t, rp.FindBrokerAddrByName("no_such_broker"))

	// The rebalance lock, on both kinds of consumer, is the one the
	// client's RebalanceImmediately takes.
	for _, c := range []any{pc, pull} {
		mu, err := RebalanceLockOf(c)
		require.NoError(t, err, "%T", c)
		cl, err := consumerClient(c)
		require.NoError(t, err, "%T", c)
		mu.Lock()
		done := make(chan struct{})
		go func() { cl.RebalanceImmediately(); close(done) }()
		select {
		case <-done:
			t.Fatalf("%T: RebalanceImmediately ran while the lock was held: not its lock", c)
		case <-time.After(100 * time.Millisecond):
		}
		mu.Unlock()
		<-done
	}

	// Releasing queues, on both kinds of consumer: the table, the paused
	// flag, the client's rebalance lock and the offset save are there, and
	// the values the table holds (process queues, which a pull request
	// carries) can be dropped.
	for _, c := range []any{pc, pull} {
		parts, err := queuePartsOf(c)
		require.NoError(t, err, "%T", c)
		require.False(t, parts.pause.Load(), "%T: a new consumer is not paused", c)
		n, err := ReleaseQueues(c)
		require.NoError(t, err, "%T", c)
		require.Zero(t, n, "%T: a consumer never started holds no queue", c)
		require.True(t, parts.pause.Load(), "%T: released means paused", c)
	}
	pqField, ok := reflect.TypeOf(consumer.PullRequest{}).FieldByName(fieldRequestPQ)
	require.True(t, ok, "consumer.PullRequest.%s", fieldRequestPQ)
	require.True(t, pqField.Type.Implements(reflect.TypeOf((*dropper)(nil)).Elem()),
		"%s lacks WithDropped(bool)", pqField.Type)
	tableField, ok := reflect.TypeOf(pc).Elem().FieldByName(fieldQueueTable)
	require.True(t, ok)
	require.Equal(t, reflect.TypeOf(sync.Map{}), tableField.Type)

	// Expiring pulls: a process queue (of the type a pull request carries)
	// has a lastPullTime that holds a time.Time, and only the queues of the
	// brokers named whose last pull started before the time given are
	// marked.
	lastField, ok := pqField.Type.Elem().FieldByName(fieldLastPullTime)
	require.True(t, ok, "%s.%s", pqField.Type.Elem(), fieldLastPullTime)
	require.True(t, reflect.PointerTo(lastField.Type).Implements(reflect.TypeOf((*atomicValue)(nil)).Elem()),
		"%s.%s is %s", pqField.Type.Elem(), fieldLastPullTime, lastField.Type)
	table := reflect.NewAt(tableField.Type, unsafe.Pointer(reflect.ValueOf(pc).Elem().FieldByIndex(tableField.Index).UnsafeAddr())).Interface().(*sync.Map)
	gone := time.Now()
	before, after := gone.Add(-time.Second), gone.Add(time.Second)
	pulled := map[int]time.Time{0: before, 1: before, 2: after, 3: before}
	brokerOf := map[int]string{0: "a", 1: "b", 2: "b", 3: "b"}
	for i := 0; i < 4; i++ {
		pq := reflect.New(pqField.Type.Elem()).Interface()
		last, err := lastPullTimeOf(pq)
		require.NoError(t, err)
		last.Store(pulled[i])
		table.Store(primitive.MessageQueue{Topic: "t", BrokerName: brokerOf[i], QueueId: i}, pq)
	}
	n, err := ExpirePulls(pc, map[string]time.Time{"b": gone, "c": gone})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	table.Range(func(k, v any) bool {
		mq := k.(primitive.MessageQueue)
		last, err := lastPullTimeOf(v)
		require.NoError(t, err)
		at := last.Load().(time.Time)
		if mq.QueueId == 1 || mq.QueueId == 3 {
			require.Greater(t, time.Since(at), 120*time.Second, "%s: expired beyond the client's _PullMaxIdleTime", mq)
		} else {
			require.Equal(t, pulled[mq.QueueId], at, "%s: left alone", mq)
		}
		table.Delete(k)
		return true
	})
	// A pull consumer's queues are given up only when stuck: with every
	// queue of the broker named pulled after it was gone, or of another
	// broker, nothing is dropped and the table stays as it was.
	fresh, err := rmq.NewPullConsumer(consumer.WithNsResolver(nowhere), consumer.WithGroupName("clientinternals_requeue"))
	require.NoError(t, err)
	freshTable := reflect.NewAt(tableField.Type, unsafe.Pointer(reflect.ValueOf(fresh).Elem().FieldByName(fieldQueueTable).UnsafeAddr())).Interface().(*sync.Map)
	for i, at := range []time.Time{after, before} {
		pq := reflect.New(pqField.Type.Elem()).Interface()
		last, err := lastPullTimeOf(pq)
		require.NoError(t, err)
		last.Store(at)
		freshTable.Store(primitive.MessageQueue{Topic: "t", BrokerName: []string{"b", "a"}[i], QueueId: i}, pq)
	}
	n, err = RequeueStuck(fresh, map[string]time.Time{"b": gone})
	require.NoError(t, err)
	require.Zero(t, n)
	kept := 0
	freshTable.Range(func(k, _ any) bool { kept++; freshTable.Delete(k); return true })
	require.Equal(t, 2, kept)

	pending, err := PendingRequests(pc)
	require.NoError(t, err)
	require.Empty(t, pending, "a client never started waits for nothing")
	n, err = ExpirePulls(pc, nil)
	require.NoError(t, err)
	require.Zero(t, n)

	// Start offsets, on both kinds of consumer: the request path, the held
	// queues and the offset store (which exists once a consumer started,
	// so its fields are checked on one the client's constructor builds).
	store := consumer.NewRemoteOffsetStore("clientinternals_store", nil, nil)
	for _, c := range []any{pc, pull} {
		require.NoError(t, CheckOffsets(c, store), "%T", c)
		req, err := ConsumerRequester(c)
		require.NoError(t, err, "%T", c)
		require.NotNil(t, req)
		held, err := HeldQueues(c)
		require.NoError(t, err, "%T", c)
		require.Empty(t, held, "%T: released above", c)
		_, _, err = ConsumedOffset(c, primitive.MessageQueue{Topic: "t"})
		require.ErrorContains(t, err, "not started", "%T", c)
	}
	mq := primitive.MessageQueue{Topic: "t", BrokerName: "b", QueueId: 1}
	_, ok, err = ConsumedOffset(store, mq)
	require.NoError(t, err)
	require.False(t, ok, "a new store holds no offset")
	now, err := RaiseConsumedOffset(store, mq, 5)
	require.NoError(t, err)
	require.EqualValues(t, 5, now)
	now, err = RaiseConsumedOffset(store, mq, 3)
	require.NoError(t, err)
	require.EqualValues(t, 5, now, "raising never lowers")
	off, ok, err := ConsumedOffset(store, mq)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 5, off)
	_, ok, err = ConsumedOffset(store, primitive.MessageQueue{Topic: "t", BrokerName: "b", QueueId: 2})
	require.NoError(t, err)
	require.False(t, ok)
}

// lookalike has none of the fields the client has.
type lookalike struct{ producer *struct{ other int } }

// TestMissingInternalsAreErrorsNotPanics: when the fields are not there,
// every function says so and nothing panics.
func TestMissingInternalsAreErrorsNotPanics(t *testing.T) {
	_, p, pc := clients(t)
	for _, v := range []any{nil, 3, &struct{}{}, &lookalike{}, &lookalike{producer: &struct{ other int }{}}, p} {
		require.Error(t, WarmTransactionProducer(v, []string{"t"}), "%T", v)
		_, err := MissingRoutes(v, []string{"t"})
		require.Error(t, err)
		_, err = TransactionProducerNameServers(v)
		require.Error(t, err)
		_, err = TransactionProducerRefresher(v)
		require.Error(t, err)
		require.Error(t, Check(v, p, pc))
	}
	for _, v := range []any{nil, "x", &struct{ client int }{}} {
		require.Error(t, WarmProducer(v, nil))
		_, err := NameServers(v)
		require.Error(t, err)
		require.Nil(t, ConsumerClientOf(v))
		_, err = ReleaseQueues(v)
		require.Error(t, err)
		_, err = ExpirePulls(v, map[string]time.Time{"b": time.Now()})
		require.Error(t, err)
		_, err = PendingRequests(v)
		require.Error(t, err)
		_, err = RequeueStuck(v, map[string]time.Time{"b": time.Now()})
		require.Error(t, err)
		_, err = ProducerRefresher(v)
		require.Error(t, err)
		_, err = ConsumerRefresher(v)
		require.Error(t, err)
		_, err = ConsumerRequester(v)
		require.Error(t, err)
		_, err = HeldQueues(v)
		require.Error(t, err)
		_, err = RebalanceLockOf(v)
		require.Error(t, err)
		_, _, err = ConsumedOffset(v, primitive.MessageQueue{})
		require.Error(t, err)
		_, err = RaiseConsumedOffset(v, primitive.MessageQueue{}, 1)
		require.Error(t, err)
		require.Error(t, CheckOffsets(v, nil))
	}
	require.Nil(t, ConsumerClientOf(p), "a producer is no push consumer")
}

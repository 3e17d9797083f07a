package clientinternals

import (
	"reflect"
	"testing"

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
		_, err = ProducerRefresher(v)
		require.Error(t, err)
		_, err = ConsumerRefresher(v)
		require.Error(t, err)
	}
	require.Nil(t, ConsumerClientOf(p), "a producer is no push consumer")
}

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
	"unsafe"
)

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

// clientField returns the field name of the client (the concrete
// *rmqClient) behind component, a producer or a consumer as the client's
// constructors return them.
func clientField(component any, name string) (reflect.Value, error) {
	c, err := clientOf(reflect.ValueOf(component))
	if err != nil {
		return reflect.Value{}, err
	}
	return field(c.Elem(), name)
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

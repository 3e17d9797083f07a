package clientinternals

import (
	"errors"
	"fmt"
	"reflect"

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

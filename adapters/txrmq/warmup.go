package txrmq

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"
)

// routeWarmer is the part of the client's internal RMQClient that warm-up
// needs. Both methods have no internal types in their signatures, so an
// ordinary interface assertion reaches them.
type routeWarmer interface {
	UpdateTopicRouteInfo()
	SendHeartbeatToAllBrokerWithLock()
}

// warmRoutes makes a freshly started transaction producer known to the
// brokers serving topics, before it sends anything.
//
// Why: a broker sends check-backs only to producers that have sent it a
// heartbeat, and the client heartbeats only to brokers it learned from the
// routes of topics it has published to. A service restarted after a crash
// would otherwise not answer check-backs for its group until its first send
// plus up to 30 s. The client has no public call for this, so warm-up
// reaches into the pinned client version's fields by reflection; if they
// are not there, it reports an error and the producer still works, with the
// delay described above.
func warmRoutes(txProducer any, topics []string) error {
	v := reflect.ValueOf(txProducer)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return errors.New("unexpected transaction producer type")
	}
	dp := v.Elem().FieldByName("producer")
	if !dp.IsValid() || dp.Kind() != reflect.Pointer || dp.IsNil() {
		return errors.New("transaction producer has no producer field")
	}
	return warmDefaultProducer(reflect.NewAt(dp.Type(), unsafe.Pointer(dp.UnsafeAddr())).Elem(), topics)
}

// warmProducerRoutes is warmRoutes for a plain producer.
func warmProducerRoutes(producer any, topics []string) error {
	v := reflect.ValueOf(producer)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return errors.New("unexpected producer type")
	}
	return warmDefaultProducer(v, topics)
}

// warmDefaultProducer warms the client's *defaultProducer dp.
func warmDefaultProducer(dp reflect.Value, topics []string) error {
	update := dp.MethodByName("UpdateTopicPublishInfo")
	if !update.IsValid() || update.Type().NumIn() != 2 || update.Type().In(1).Kind() != reflect.Pointer {
		return errors.New("producer has no UpdateTopicPublishInfo(topic, *info)")
	}
	cf := dp.Elem().FieldByName("client")
	if !cf.IsValid() || cf.Kind() != reflect.Interface {
		return errors.New("producer has no client field")
	}
	cf = reflect.NewAt(cf.Type(), unsafe.Pointer(cf.UnsafeAddr())).Elem()
	client, ok := cf.Interface().(routeWarmer)
	if !ok {
		return errors.New("client lacks UpdateTopicRouteInfo/SendHeartbeatToAllBrokerWithLock")
	}
	infoType := update.Type().In(1).Elem()
	for _, topic := range topics {
		// An empty publish entry marks the topic as one the producer
		// publishes to, so the client's route refresh fetches it.
		update.Call([]reflect.Value{reflect.ValueOf(topic), reflect.New(infoType)})
	}
	client.UpdateTopicRouteInfo()
	client.SendHeartbeatToAllBrokerWithLock()
	return nil
}

// topicsReady reports which of topics now have a publish route.
func topicsReady(txProducer any, topics []string) (missing []string, err error) {
	v := reflect.ValueOf(txProducer)
	dp := v.Elem().FieldByName("producer")
	if !dp.IsValid() {
		return nil, errors.New("transaction producer has no producer field")
	}
	dp = reflect.NewAt(dp.Type(), unsafe.Pointer(dp.UnsafeAddr())).Elem()
	need := dp.MethodByName("IsPublishTopicNeedUpdate")
	if !need.IsValid() {
		return nil, fmt.Errorf("producer has no IsPublishTopicNeedUpdate")
	}
	for _, t := range topics {
		if need.Call([]reflect.Value{reflect.ValueOf(t)})[0].Bool() {
			missing = append(missing, t)
		}
	}
	return missing, nil
}

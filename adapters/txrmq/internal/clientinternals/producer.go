package clientinternals

import (
	"errors"
	"fmt"
	"reflect"
)

// routeWarmer is the part of the client's internal RMQClient that warm-up
// needs.
type routeWarmer interface {
	UpdateTopicRouteInfo()
	SendHeartbeatToAllBrokerWithLock()
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

package testbed

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
)

// propertyID is txmsg.PropertyID; testbed does not import txmsg so that
// txmsg's own tests can use it.
const propertyID = "TXMSG_ID"

// Observer records every delivery of one topic to a fresh consumer group,
// by txmsg ID and in arrival order.
type Observer struct {
	mu    sync.Mutex
	byID  map[string][]*primitive.MessageExt
	order []*primitive.MessageExt
}

// Observe subscribes a new consumer group to topic from its first offset,
// shut down when t ends. handle, when set, runs first for each message;
// an error asks the broker to deliver it again and the delivery is not
// recorded.
func Observe(t testing.TB, topic string, handle func(*primitive.MessageExt) error) *Observer {
	t.Helper()
	RequireBroker(t)
	rmqlog.Install(slog.Default(), slog.LevelError)
	o := &Observer{byID: map[string][]*primitive.MessageExt{}}
	name := Name(t, "obs")
	c, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{NameServer()})),
		consumer.WithGroupName(name),
		consumer.WithInstance(name),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		t.Fatalf("observer: %v", err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			if handle != nil {
				if err := handle(m); err != nil {
					return consumer.ConsumeRetryLater, nil
				}
			}
			o.mu.Lock()
			id := m.GetProperty(propertyID)
			o.byID[id] = append(o.byID[id], m)
			o.order = append(o.order, m)
			o.mu.Unlock()
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatalf("observer subscribe %s: %v", topic, err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("observer start: %v", err)
	}
	// Suspend, never Shutdown: the client's Shutdown races with a
	// rebalance it may be running (a data race inside rocketmq-client-go
	// that -race reports), so observers stop pulling and stay until the
	// test binary exits.
	t.Cleanup(c.Suspend)
	return o
}

// Count is how many times id was delivered.
func (o *Observer) Count(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.byID[id])
}

// First is id's first delivery, or nil.
func (o *Observer) First(id string) *primitive.MessageExt {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.byID[id]) == 0 {
		return nil
	}
	return o.byID[id][0]
}

// Distinct is how many different txmsg IDs arrived.
func (o *Observer) Distinct() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.byID)
}

// Total is how many deliveries arrived.
func (o *Observer) Total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.order)
}

// Order returns the deliveries in arrival order.
func (o *Observer) Order() []*primitive.MessageExt {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*primitive.MessageExt(nil), o.order...)
}

// DeliveredOnce waits up to a minute for id and then checks for two
// seconds that no second copy follows.
func (o *Observer) DeliveredOnce(t testing.TB, id string) {
	t.Helper()
	o.waitFor(t, id, time.Minute)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if n := o.Count(id); n > 1 {
			t.Fatalf("message %s delivered %d times", id, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Delivered waits up to a minute for id's first delivery.
func (o *Observer) Delivered(t testing.TB, id string) {
	t.Helper()
	o.waitFor(t, id, time.Minute)
}

// DeliveredWithin waits up to d for id's first delivery and returns how
// long it waited.
func (o *Observer) DeliveredWithin(t testing.TB, id string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	o.waitFor(t, id, d)
	return time.Since(start)
}

func (o *Observer) waitFor(t testing.TB, id string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for o.Count(id) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("message %s was not delivered within %s", id, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// NeverDelivered asserts that id does not arrive during d; make d span
// several of the test broker's 1 s check-back rounds.
func (o *Observer) NeverDelivered(t testing.TB, id string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if o.Count(id) > 0 {
			t.Fatalf("message %s must never be delivered", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// NoDeliveries asserts that nothing at all arrives during d.
func (o *Observer) NoDeliveries(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if n := o.Total(); n > 0 {
			t.Fatalf("%d unexpected deliveries", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

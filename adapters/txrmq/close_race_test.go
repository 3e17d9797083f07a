package txrmq_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/txmsg"
)

// startStopper is a consumer as the close-race tests drive it.
type startStopper interface {
	Start(context.Context) error
	Close(context.Context) error
}

// closeWhilePullsDeliver starts and closes consumers of one group, one
// after the other, while messages keep arriving, so that every Close meets
// pulls of the client that are returning messages. The client's Shutdown
// closes each process queue's channel while such a pull may still send on
// it: a data race, which fails the test under -race, and with bad luck a
// "send on closed channel" panic, which ends the test binary. Then a last
// consumer, started after the traffic stops, finds every message: what the
// closed consumers left unhandled was not acknowledged.
func closeWhilePullsDeliver(t *testing.T, b *consumerBed, newConsumer func(txmsg.Route) startStopper) {
	const cycles = 24
	ctx := context.Background()

	// Handlers take a little while, so that at each Close pulled batches
	// are still waiting in the client.
	var handled atomic.Int64
	route := txmsg.Handle(b.topicOf(), func(context.Context, *gorm.DB, txmsg.Delivery[consumerEvent]) error {
		time.Sleep(5 * time.Millisecond)
		handled.Add(1)
		return nil
	})

	// Steady traffic until the cycles are over. A send the broker turns
	// away (it is shared, and may be busy) is not counted.
	stop := make(chan struct{})
	var published []string // IDs of the messages the broker took
	var traffic sync.WaitGroup
	publish := func() {
		defer traffic.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m := b.message(consumerEvent{N: i})
			if err := b.pub.Publish(ctx, m); err != nil {
				t.Logf("publish (not counted): %v", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			published = append(published, m.ID)
			time.Sleep(2 * time.Millisecond)
		}
	}
	startTraffic := func() {
		traffic.Add(1)
		go publish()
	}
	stopTraffic := sync.OnceFunc(func() { close(stop); traffic.Wait() })
	defer stopTraffic()

	for i := range cycles {
		c := newConsumer(route)
		require.NoError(t, c.Start(ctx))
		if i == 0 {
			// The group's first Start fixes where it begins in each queue
			// (the end, for a new group); what is published before it
			// returns may be skipped.
			startTraffic()
		}
		before := handled.Load()
		require.Eventually(t, func() bool { return handled.Load() >= before+3 }, consumerWait, 5*time.Millisecond,
			"cycle %d: messages flow", i)
		closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		require.NoError(t, c.Close(closeCtx), "cycle %d", i)
		cancel()
	}
	stopTraffic()

	last := newConsumer(route)
	require.NoError(t, last.Start(ctx))
	defer func() { require.NoError(t, last.Close(ctx)) }()
	table, _ := b.inbox.Tables()
	var got atomic.Int64
	if !assert.Eventually(t, func() bool {
		got.Store(b.count(b.db.Table(table).Where("consumer_group = ? AND msg_id IN ?", b.group, published)))
		return got.Load() == int64(len(published))
	}, 60*time.Second, 100*time.Millisecond) {
		var ids []string
		require.NoError(t, b.db.Table(table).Where("consumer_group = ? AND msg_id IN ?", b.group, published).Pluck("msg_id", &ids).Error)
		have := make(map[string]bool, len(ids))
		for _, id := range ids {
			have[id] = true
		}
		for i, id := range published {
			if !have[id] {
				t.Logf("missing: message %d of %d (%s), deliveries seen: %+v", i, len(published), id, b.of(id))
			}
		}
		t.Fatalf("%d of %d published messages handled; the others were lost", got.Load(), len(published))
	}
	t.Logf("%d cycles, %d messages published, %d deliveries handled", cycles, len(published), handled.Load())
}

// TestConsumerCloseWhilePullsDeliver: Consumer.Close leaves no pull able
// to deliver into a channel the client closes (see closeWhilePullsDeliver).
func TestConsumerCloseWhilePullsDeliver(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	closeWhilePullsDeliver(t, b, func(route txmsg.Route) startStopper {
		c, err := txrmq.NewConsumer(b.inbox, []txmsg.Route{route}, b.config())
		require.NoError(t, err)
		return c
	})
}

// TestOrderedConsumerCloseWhilePullsDeliver is the same for the
// OrderedConsumer, whose pull consumer has the same process queues.
func TestOrderedConsumerCloseWhilePullsDeliver(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	closeWhilePullsDeliver(t, b, func(route txmsg.Route) startStopper {
		c, err := txrmq.NewOrderedConsumer(b.inbox, []txmsg.Route{route}, b.orderedConfig())
		require.NoError(t, err)
		return c
	})
}

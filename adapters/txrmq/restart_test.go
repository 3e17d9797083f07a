package txrmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// restartable is what the restart test reads of either consumer.
type restartable interface {
	PendingRequests() ([]int32, error)
}

// After a broker is SIGKILLed and started again, each consumer handles an
// event published after the restart while the pulls it had sent before
// the kill are still waiting for their answer: their queues were
// re-created with new pulls at the broker's return, instead of pulling
// again when the lost pulls time out (30 s after they were sent, and 3 s
// more). On the client alone, nothing is pulled before those pulls have
// returned, so the check below fails.
//
// The same holds when the broker dies right after Start, before the
// consumer's broker watcher first looked at the routes ("early"): the
// watcher never saw the broker, and learns of its return when it appears
// in the routes again. There the client, on its own, re-created the
// queues 20 s after the kill in two runs, before the lost pulls returned;
// what fails without the watcher's part is the count of queues it
// re-created.
//
// It needs a broker of its own (testbed.BrokerRestartEnv) and takes about
// 80 s: one restart per kind of consumer and case, so that the requests
// checked are that consumer's alone.
func TestBrokerRestartConsumerPullsAgainAtOnce(t *testing.T) {
	testbed.RequireRestartableBroker(t)
	for _, kind := range consumerKinds {
		for _, early := range []bool{false, true} {
			name := kind
			if early {
				name += "/early"
			}
			t.Run(name, func(t *testing.T) { testBrokerRestartPullsAgain(t, kind, early) })
		}
	}
}

func testBrokerRestartPullsAgain(t *testing.T, kind string, early bool) {
	b := newConsumerBed(t)
	var (
		mu          sync.Mutex
		c           restartable
		afterID     string
		lostAtKill  map[int32]bool
		stillLost   []int32 // pulls lost at the kill, still waiting when the event after the restart was handled
		pendingErr  error
		handledLate = make(chan struct{})
	)
	b.watch(func(_ string, r *txmsg.Received, o txmsg.Outcome, err error) {
		mu.Lock()
		defer mu.Unlock()
		if afterID == "" || r.Message.ID != afterID || o != txmsg.OutcomeHandled || err != nil {
			return
		}
		select {
		case <-handledLate:
			return
		default:
		}
		pending, perr := c.PendingRequests()
		pendingErr = perr
		for _, o := range pending {
			if lostAtKill[o] {
				stillLost = append(stillLost, o)
			}
		}
		close(handledLate)
	})
	handled := make(chan string, 16)
	route := txmsg.Handle(b.topicOf(), func(_ context.Context, _ *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
		select {
		case handled <- d.Message.ID:
		default:
		}
		return nil
	})
	var requeued func() int64
	mu.Lock()
	switch kind {
	case "concurrent":
		cc := b.start(b.config(), route)
		c, requeued = cc, cc.QueuesExpired
	case "ordered":
		oc, err := txrmq.NewOrderedConsumer(b.inbox, []txmsg.Route{route}, txrmq.OrderedConsumerConfig{Conn: b.config().Conn, Group: b.group})
		require.NoError(t, err)
		require.NoError(t, oc.Start(context.Background()))
		t.Cleanup(func() { _ = oc.Close(context.Background()) })
		c, requeued = oc, oc.QueuesRequeued
	}
	mu.Unlock()

	if !early {
		before := b.message(consumerEvent{N: 1})
		b.publish(before)
		select {
		case id := <-handled:
			require.Equal(t, before.ID, id)
		case <-time.After(time.Minute):
			t.Fatal("the event before the kill was not handled")
		}
		// The consumer looks up the brokers it watches at its first 500 ms
		// tick; its queues are idle, each with a pull the broker holds.
		time.Sleep(2 * time.Second)
	}

	testbed.KillBroker(t)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			testbed.StartBroker(t)
		}
	})
	pending, err := c.PendingRequests()
	require.NoError(t, err)
	mu.Lock()
	lostAtKill = map[int32]bool{}
	for _, o := range pending {
		lostAtKill[o] = true
	}
	mu.Unlock()
	require.NotEmpty(t, pending, "no pull was in flight when the broker died")
	t.Logf("requests in flight at the kill: %v", pending)

	testbed.StartBroker(t)
	restarted = true

	after := b.message(consumerEvent{N: 2})
	mu.Lock()
	afterID = after.ID
	mu.Unlock()
	require.Eventually(t, func() bool {
		return b.pub.Publish(context.Background(), after) == nil
	}, time.Minute, 200*time.Millisecond, "publish after the restart")
	select {
	case <-handledLate:
	case <-time.After(2 * time.Minute):
		t.Fatal("the event after the restart was not handled")
	}
	mu.Lock()
	lost := stillLost
	err = pendingErr
	mu.Unlock()
	require.NoError(t, err)
	t.Logf("queues re-created when the event was handled: %d; pulls lost at the kill still waiting then: %v", requeued(), lost)
	require.NotEmpty(t, lost,
		"the event after the restart was handled only once every pull lost with the broker had returned")
	// The event may land on a queue whose pull was not in flight at the
	// kill, and be handled before the consumer's next look at the brokers;
	// the queues whose pulls were lost are re-created at that look.
	require.Eventually(t, func() bool { return requeued() > 0 }, 10*time.Second, 100*time.Millisecond,
		"pulls lost at the kill were still waiting, yet no queue was re-created")
}

package txrmq_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestConsumerBufferIsBounded: while handlers are busy, the client pulls
// ahead at most ConsumerConfig.BufferMessages (here on one queue, which
// gets it all, plus one pull batch of 32); the rest of the lag waits on
// the broker. With the client's own bound (102,400 per consumer) it held
// all 400 messages here.
func TestConsumerBufferIsBounded(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	// One queue, whose share is the whole bound.
	b.topic = testbed.Name(t, "txmsg")
	require.NoError(t, testbed.CreateTopic(context.Background(), b.topic, 1))
	release := make(chan struct{})
	var entered atomic.Int64
	cfg := b.config()
	cfg.Concurrency = 1
	cfg.BufferMessages = 10
	c := b.start(cfg, txmsg.Handle(b.topicOf(), func(ctx context.Context, _ *gorm.DB, _ txmsg.Delivery[consumerEvent]) error {
		entered.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	// Registered after the consumer's Close, so it runs first: Close waits
	// for the handler.
	t.Cleanup(func() { close(release) })
	const n = 400
	msgs := make([]*txmsg.Message, n)
	for i := range msgs {
		msgs[i] = b.message(consumerEvent{N: i})
	}
	b.publish(msgs...)

	// Wait until the client has reached the bound, then give it time to
	// pull more if it would. Reached means the bound less the messages in
	// the handlers: a first pull that came while the publish was still
	// under way may return just the bound's worth, one of which the
	// handler holds, and the client then rightly pulls no more (a CI run
	// saw 9 held, 1 in the handler). The wait is generous: this test
	// bounds how much the client holds, not how soon it first pulls on a
	// loaded machine; a failure says how far the client got.
	reached := int64(cfg.BufferMessages - cfg.Concurrency)
	var held int64
	if !assert.Eventually(t, func() bool {
		var err error
		held, err = c.Buffered()
		require.NoError(t, err)
		return held >= reached
	}, 3*consumerWait, consumerTick) {
		pending, err := c.PendingRequests()
		t.Fatalf("the client holds %d messages (want at least %d), a handler was entered %d times, requests awaiting an answer: %v (err %v)",
			held, reached, entered.Load(), pending, err)
	}
	time.Sleep(3 * time.Second)
	held, err := c.Buffered()
	require.NoError(t, err)
	require.LessOrEqual(t, held, int64(10+32+1), "messages held in memory past BufferMessages")
}

package txrmq

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func newTestPublisher(t *testing.T, maxBatch int) *Publisher {
	t.Helper()
	testbed.RequireBroker(t)
	p, err := NewPublisher(PublisherConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "pub"),
		MaxBatch: maxBatch,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func TestPublisherBatchesAndKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	p := newTestPublisher(t, 16)

	var msgs []*txmsg.Message
	for i := 0; i < 60; i++ {
		msgs = append(msgs, &txmsg.Message{
			Topic:       topic,
			ShardingKey: fmt.Sprintf("user-%d", i%3),
			Body:        []byte(fmt.Sprintf(`{"seq":%d}`, i)),
			Properties:  map[string]string{"seq": fmt.Sprint(i)},
		})
	}
	require.NoError(t, p.Publish(context.Background(), msgs...))
	for _, m := range msgs {
		require.NotEmpty(t, m.ID, "Publish assigns IDs")
	}
	require.Eventually(t, func() bool {
		for _, m := range msgs {
			if obs.Count(m.ID) == 0 {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond)

	// Every message of one sharding key went to one queue, in order.
	queueOf := map[string]int{}
	lastOffset := map[int]int64{}
	for _, m := range msgs {
		got := obs.First(m.ID)
		require.Equal(t, m.Properties["seq"], got.GetProperty("seq"))
		require.Equal(t, m.ShardingKey, got.GetProperty(txmsg.PropertyShardingKey))
		q := got.Queue.QueueId
		if prev, ok := queueOf[m.ShardingKey]; ok {
			require.Equal(t, prev, q, "key %s moved queues", m.ShardingKey)
		}
		queueOf[m.ShardingKey] = q
		if prev, ok := lastOffset[q]; ok {
			require.Greater(t, got.QueueOffset, prev, "order broken on queue %d", q)
		}
		lastOffset[q] = got.QueueOffset
	}
}

func TestPublisherReportsInvalidMessagesPerIndex(t *testing.T) {
	t.Parallel()
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	p := newTestPublisher(t, 0)
	good := &txmsg.Message{Topic: topic, Body: []byte("ok")}
	bad := &txmsg.Message{Topic: topic, Body: make([]byte, txmsg.DefaultMaxBodySize+1)}
	err := p.Publish(context.Background(), good, bad)
	var be *txmsg.BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Errs, 2)
	require.NoError(t, be.Errs[0])
	require.ErrorIs(t, be.Errs[1], txmsg.ErrBodyTooLarge)
	obs.DeliveredOnce(t, good.ID)

	err = p.Publish(context.Background(), &txmsg.Message{Topic: "bad topic"})
	require.ErrorIs(t, err, txmsg.ErrInvalidTopic)
}

func TestPublisherClosedAndDeadBroker(t *testing.T) {
	t.Parallel()
	p := newTestPublisher(t, 0)
	require.NoError(t, p.Close(context.Background()))
	require.ErrorIs(t, p.Publish(context.Background(), &txmsg.Message{Topic: "t1", Body: []byte("x")}), txmsg.ErrClosed)

	// A name server nobody listens on: the publish fails with an error
	// within the send timeout instead of hanging.
	dead, err := NewPublisher(PublisherConfig{Conn: Conn{NameServers: []string{"127.0.0.1:1"}}, Group: testbed.Name(t, "dead"), SendTimeout: time.Second, Retries: 1})
	require.NoError(t, err)
	require.NoError(t, dead.Start(context.Background()))
	t.Cleanup(func() { _ = dead.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := &txmsg.Message{Topic: "txmsg_nowhere", Body: []byte("x")}
	err = dead.Publish(ctx, m)
	require.ErrorIs(t, err, txmsg.ErrUnavailable, "no name server: the broker's failure, not the message's")
	require.NotErrorIs(t, err, txmsg.ErrRejected)
	require.True(t, txmsg.IsUnavailable(err))
}

// TestPublisherClassifiesRejection: the broker refuses a body over its
// maxMessageSize (4 MiB on the test broker) with MESSAGE_ILLEGAL, and the
// publisher reports that message as rejected. In a batch with a good
// message, the good one is still published and only the big one fails.
func TestPublisherClassifiesRejection(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	p, err := NewPublisher(PublisherConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "pub"), MaxBodySize: 5 << 20})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	big := make([]byte, 4<<20+1024)
	_, _ = rand.Read(big) // incompressible: the client compresses large bodies
	tooBig := &txmsg.Message{Topic: topic, Body: big}
	err = p.Publish(context.Background(), tooBig)
	require.ErrorIs(t, err, txmsg.ErrRejected)
	require.False(t, txmsg.IsUnavailable(err))
	require.ErrorContains(t, err, "CODE: 13")

	good := &txmsg.Message{Topic: topic, Body: []byte("fine")}
	tooBig = &txmsg.Message{Topic: topic, Body: big}
	err = p.Publish(context.Background(), good, tooBig)
	var be *txmsg.BatchError
	require.ErrorAs(t, err, &be)
	require.NoError(t, be.Errs[0])
	require.ErrorIs(t, be.Errs[1], txmsg.ErrRejected)
	obs.DeliveredOnce(t, good.ID)
	require.Zero(t, obs.Count(tooBig.ID))
}

func TestClassifySendError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err      string
		rejected bool
	}{
		{"CODE: 13, DESC: the message is illegal, maybe msg body or properties length not matched.", true},
		{"CODE: 16, DESC: the topic[orders] sending message is forbidden", true},
		{"CODE: 16, DESC: Sending message to topic[orders] is forbidden.", true},
		{"CODE: 16, DESC: the broker[127.0.0.1] sending message is forbidden", false},
		{"CODE: 14, DESC: service not available now", false},
		{"CODE: 2, DESC: [TIMEOUT_CLEAN_QUEUE]broker busy", false},
		{"CODE: 1, DESC: [PC_SYNCHRONIZED]broker busy", false},
		{"CODE: 1, DESC: java.lang.RuntimeException: message body size exceeded, org.apache.rocketmq.store.MessageExtEncoder.encode", true},
		{"CODE: 17, DESC: topic[orders] not exist, apply first please!", false},
		{"the topic=orders route info not found", false},
		{"request timeout", false},
		{"dial tcp 127.0.0.1:10911: connect: connection refused", false},
	} {
		err := classifySendError(errors.New(c.err))
		require.Equal(t, c.rejected, errors.Is(err, txmsg.ErrRejected), c.err)
		require.Equal(t, !c.rejected, errors.Is(err, txmsg.ErrUnavailable), c.err)
		require.Equal(t, !c.rejected, txmsg.IsUnavailable(err), c.err)
		require.ErrorContains(t, err, c.err)
	}
}

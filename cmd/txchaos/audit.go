package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/txmsg"
)

// storedMsg is one message as the broker stores it in a topic.
type storedMsg struct {
	ID    string
	Key   string
	Seq   int
	Queue int
	// Broker holds Queue: queue numbers repeat on every broker of a
	// cluster.
	Broker string
	Offset int64
	// Group is the producer group that sent this copy, when the broker
	// says (transactional messages carry it).
	Group string
	// Delayed: the copy carries a due time (txmsg.WithDelay); in
	// transactional mode the forwarder sent it, with no producer group.
	Delayed bool
}

type queueRef struct {
	topic  string
	broker string
	queue  int
}

// auditTopics reads every message stored in topics, from the first
// offset, through a fresh consumer group: the broker's final state, which
// I4 compares with the barrier and the outbox, and whose queue order I5
// checks. (A raw client rather than txmsg's consumer: this needs queue
// offsets, and must not dedupe.) It returns when every queue read so far is
// complete up to its maximum offset and nothing new came for quiet, or at
// the deadline with what it has.
func auditTopics(ctx context.Context, nameServer, group string, topics []string, quiet, deadline time.Duration) (map[string][]storedMsg, bool, error) {
	var (
		mu     sync.Mutex
		seen   = map[queueRef]map[int64]storedMsg{}
		maxOff = map[queueRef]int64{}
		minOff = map[queueRef]int64{}
		last   = time.Now()
	)
	c, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{nameServer})),
		consumer.WithGroupName(group),
		consumer.WithInstance(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumeMessageBatchMaxSize(32),
	)
	if err != nil {
		return nil, false, fmt.Errorf("audit consumer: %w", err)
	}
	for _, topic := range topics {
		err := c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				ref := queueRef{topic: m.Topic, broker: m.Queue.BrokerName, queue: m.Queue.QueueId}
				if seen[ref] == nil {
					seen[ref] = map[int64]storedMsg{}
				}
				if _, dup := seen[ref][m.QueueOffset]; !dup {
					last = time.Now()
				}
				var evt orderEvent
				_ = json.Unmarshal(m.Body, &evt)
				seen[ref][m.QueueOffset] = storedMsg{
					ID: m.GetProperty(txmsg.PropertyID), Key: m.GetProperty(txmsg.PropertyShardingKey), Seq: evt.Seq,
					Queue: m.Queue.QueueId, Broker: m.Queue.BrokerName, Offset: m.QueueOffset, Group: m.GetProperty(primitive.PropertyProducerGroup),
					Delayed: m.GetProperty(txmsg.PropertyDeliverAt) != "",
				}
				if v, err := strconv.ParseInt(m.GetProperty(primitive.PropertyMaxOffset), 10, 64); err == nil && v > maxOff[ref] {
					maxOff[ref] = v
				}
				if v, err := strconv.ParseInt(m.GetProperty(primitive.PropertyMinOffset), 10, 64); err == nil {
					minOff[ref] = v
				}
			}
			return consumer.ConsumeSuccess, nil
		})
		if err != nil {
			return nil, false, fmt.Errorf("audit subscribe %s: %w", topic, err)
		}
	}
	if err := c.Start(); err != nil {
		return nil, false, fmt.Errorf("audit consumer start: %w", err)
	}
	defer func() { _ = c.Shutdown() }()

	complete := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 || time.Since(last) < quiet {
			return false
		}
		for ref, offs := range seen {
			if int64(len(offs)) < maxOff[ref]-minOff[ref] {
				return false
			}
		}
		return true
	}
	end := time.Now().Add(deadline)
	done := false
	for !done && time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(250 * time.Millisecond)
		done = complete()
	}
	mu.Lock()
	defer mu.Unlock()
	out := map[string][]storedMsg{}
	for ref, offs := range seen {
		for _, m := range offs {
			out[ref.topic] = append(out[ref.topic], m)
		}
	}
	return out, done, ctx.Err()
}

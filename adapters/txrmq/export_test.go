package txrmq

import (
	"context"
	"fmt"
	"sort"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
)

const reqGetMinOffset = 31

// QueueOffsets is what the broker says of one queue of a topic.
type QueueOffsets struct {
	Queue primitive.MessageQueue
	// Committed is the group's committed offset, -1 when it has none (the
	// broker's answer without its "0 while the first message is in memory"
	// rule).
	Committed int64
	// Min and Max are the queue's first and next offsets.
	Min, Max int64
}

// BrokerOffsets asks the brokers, through the publisher's client, about
// every queue of topic (the broker name server's view) for group. fallback
// is the address of a broker the publisher's client has not learnt yet.
func (p *Publisher) BrokerOffsets(ctx context.Context, group, topic, fallback string) ([]QueueOffsets, error) {
	req, err := clientinternals.ConsumerRequester(p.prod)
	if err != nil {
		return nil, err
	}
	rp, err := clientinternals.NameServers(p.prod)
	if err != nil {
		return nil, err
	}
	mqs, err := rp.FetchSubscribeMessageQueues(p.cfg.brokerTopic(topic))
	if err != nil {
		return nil, err
	}
	// A group is namespaced as a topic is.
	sp := &startPinner{group: p.cfg.brokerTopic(group), req: req}
	var out []QueueOffsets
	for _, mq := range mqs {
		addr := rp.FindBrokerAddrByName(mq.BrokerName)
		if addr == "" {
			addr = fallback
		}
		q := QueueOffsets{Queue: *mq, Committed: -1}
		off, found, err := sp.committed(ctx, addr, *mq)
		if err != nil {
			return nil, err
		}
		if found {
			q.Committed = off
		}
		if q.Max, err = sp.maxOffset(ctx, addr, *mq); err != nil {
			return nil, err
		}
		resp, err := sp.call(ctx, addr, reqGetMinOffset, *mq, nil)
		if err == nil && resp.Code != resSuccess {
			err = brokerError(resp, group)
		}
		if err == nil {
			q.Min, err = offsetField(resp)
		}
		if err != nil {
			return nil, fmt.Errorf("queue %s: min offset: %w", queueName(*mq), err)
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Queue.BrokerName != out[j].Queue.BrokerName {
			return out[i].Queue.BrokerName < out[j].Queue.BrokerName
		}
		return out[i].Queue.QueueId < out[j].Queue.QueueId
	})
	return out, nil
}

// QueuesExpired is how many queues the consumer marked, at a broker's
// return, for re-creation because their pull was in flight when the broker
// died.
func (c *Consumer) QueuesExpired() int64 { return c.requeued.Load() }

// PendingRequests returns the request numbers the consumer's client still
// waits an answer for.
func (c *Consumer) PendingRequests() ([]int32, error) { return clientinternals.PendingRequests(c.pc) }

// QueuesRequeued is how many queues the ordered consumer gave up, at a
// broker's return, for re-creation because their pull was in flight when
// the broker died.
func (c *OrderedConsumer) QueuesRequeued() int64 { return c.requeued.Load() }

// PendingRequests returns the request numbers the ordered consumer's
// client still waits an answer for.
func (c *OrderedConsumer) PendingRequests() ([]int32, error) {
	return clientinternals.PendingRequests(c.pc)
}

// Buffered is how many messages the consumer's client holds in memory,
// pulled and not yet consumed.
func (c *Consumer) Buffered() (int64, error) { return clientinternals.Buffered(c.pc) }

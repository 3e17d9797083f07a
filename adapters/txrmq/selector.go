package txrmq

import (
	"hash/fnv"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// shardSelector sends messages with a sharding key to the queue the key
// hashes to, and spreads the rest round-robin. Both the transactional
// producer and the publisher use it, so a key lands on the same queue in
// either mode.
//
// The client builds a batch as a fresh message that drops every property,
// keeping only the first message's Queue field. For a batch, the publisher
// therefore carries the key in Queue.BrokerName of its first message (see
// markBatchKey); the selector reads it from there.
type shardSelector struct {
	rr producer.QueueSelector
}

func newShardSelector() *shardSelector {
	return &shardSelector{rr: producer.NewRoundRobinQueueSelector()}
}

const batchKeyMarker = "\x00txmsg-key:"

func markBatchKey(first *primitive.Message, key string) {
	first.Queue = &primitive.MessageQueue{BrokerName: batchKeyMarker + key, QueueId: -1}
}

func (s *shardSelector) Select(m *primitive.Message, queues []*primitive.MessageQueue, lastBroker string) *primitive.MessageQueue {
	key := m.GetShardingKey()
	if key == "" && m.Queue != nil && m.Queue.QueueId == -1 && len(m.Queue.BrokerName) > len(batchKeyMarker) &&
		m.Queue.BrokerName[:len(batchKeyMarker)] == batchKeyMarker {
		key = m.Queue.BrokerName[len(batchKeyMarker):]
	}
	if key == "" || len(queues) == 0 {
		return s.rr.Select(m, queues, lastBroker)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return queues[h.Sum32()%uint32(len(queues))]
}

var _ producer.QueueSelector = (*shardSelector)(nil)

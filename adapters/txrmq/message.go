package txrmq

import (
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/internal/rmqmsg"
	"github.com/txmsg/txmsg/txmsg"
)

// toPrimitive converts a validated txmsg message to the client's message.
// The txmsg ID goes into a user property and the message keys.
func toPrimitive(m *txmsg.Message) *primitive.Message {
	pm := primitive.NewMessage(m.Topic, m.Body)
	if m.Tag != "" {
		pm.WithTag(m.Tag)
	}
	if keys := m.AllKeys(); len(keys) > 0 {
		pm.WithKeys(keys)
	}
	for k, v := range m.Properties {
		pm.WithProperty(k, v)
	}
	pm.WithProperty(txmsg.PropertyID, m.ID)
	pm.WithProperty(txmsg.PropertyTopic, m.Topic)
	if !m.DeliverAt.IsZero() {
		pm.WithProperty(txmsg.PropertyDeliverAt, txmsg.FormatDeliverAt(m.DeliverAt))
	}
	if m.ShardingKey != "" {
		pm.WithShardingKey(m.ShardingKey)
		pm.WithProperty(txmsg.PropertyShardingKey, m.ShardingKey)
	}
	return pm
}

// fromExt converts a consumed message to txmsg's envelope; see
// [rmqmsg.Received].
func fromExt(ext *primitive.MessageExt) *txmsg.Received { return rmqmsg.Received(ext) }

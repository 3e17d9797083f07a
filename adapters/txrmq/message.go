package txrmq

import (
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
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
	if m.ShardingKey != "" {
		pm.WithShardingKey(m.ShardingKey)
		pm.WithProperty(txmsg.PropertyShardingKey, m.ShardingKey)
	}
	return pm
}

// fromExt converts a consumed message to txmsg's envelope. The dedupe key
// (Message.ID) is the txmsg ID when present, else the client's unique
// message ID, which stays the same across redeliveries.
func fromExt(ext *primitive.MessageExt) *txmsg.Received {
	props := ext.GetProperties()
	m := &txmsg.Message{
		ID:          props[txmsg.PropertyID],
		Topic:       ext.Topic,
		Tag:         ext.GetTags(),
		ShardingKey: props[txmsg.PropertyShardingKey],
		Body:        ext.Body,
	}
	if real := props[primitive.PropertyRetryTopic]; real != "" {
		m.Topic = real
	}
	if real := props[txmsg.PropertyTopic]; real != "" {
		m.Topic = real
	}
	if m.ID == "" {
		m.ID = ext.MsgId
	}
	for _, k := range strings.Fields(ext.GetKeys()) {
		if k != m.ID {
			m.Keys = append(m.Keys, k)
		}
	}
	for k, v := range props {
		if !driver.ReservedProperty(k) {
			if m.Properties == nil {
				m.Properties = map[string]string{}
			}
			m.Properties[k] = v
		}
	}
	r := &txmsg.Received{
		Message:         m,
		BrokerMessageID: ext.MsgId,
		Attempt:         int(ext.ReconsumeTimes) + 1,
	}
	if ext.BornTimestamp > 0 {
		r.BornAt = time.UnixMilli(ext.BornTimestamp)
	}
	return r
}

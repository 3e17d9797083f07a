// Package rmqmsg turns a message the RocketMQ client consumed into
// txmsg's envelope, for the consumers of adapters/txrmq and the test bed's
// observers alike.
package rmqmsg

import (
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// Received converts a consumed message to txmsg's envelope: the txmsg ID,
// the real topic (not the retry topic a redelivery comes from), tag, keys
// other than the ID, sharding key, body and user properties, with the
// broker's message ID, the attempt, when the message was born, when it
// was due (a delayed message) and when it was received. The
// dedupe key (Message.ID) is the txmsg ID when present, else the
// client's unique message ID, which stays the same across redeliveries.
func Received(ext *primitive.MessageExt) *txmsg.Received {
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
		ReceivedAt:      time.Now(),
	}
	if due, ok := txmsg.ParseDeliverAt(props[txmsg.PropertyDeliverAt]); ok {
		r.DueAt = due
		m.DeliverAt = due
	}
	if ext.BornTimestamp > 0 {
		r.BornAt = time.UnixMilli(ext.BornTimestamp)
	}
	return r
}

// Package observe records what a consumer of a test topic receives as
// txmsg messages, for the conformance suites of txmsg/txmsgtest.
package observe

import (
	"strings"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
	"github.com/txmsg/txmsg/txmsg/txmsgtest"
)

// Topic subscribes a new consumer group to topic from its first offset
// ([testbed.Observe]) and records every delivery, duplicates included.
func Topic(t testing.TB, topic string) *txmsgtest.Recorder {
	t.Helper()
	rec := &txmsgtest.Recorder{}
	testbed.Observe(t, topic, func(ext *primitive.MessageExt) error {
		rec.Record(Message(ext))
		return nil
	})
	return rec
}

// Message is ext as a txmsg message: the txmsg ID, topic, tag, keys other
// than the ID, sharding key, body and user properties.
func Message(ext *primitive.MessageExt) *txmsg.Message {
	props := ext.GetProperties()
	m := &txmsg.Message{
		ID:          props[txmsg.PropertyID],
		Topic:       ext.Topic,
		Tag:         ext.GetTags(),
		ShardingKey: props[txmsg.PropertyShardingKey],
		Body:        ext.Body,
	}
	if real := props[txmsg.PropertyTopic]; real != "" {
		m.Topic = real
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
	return m
}

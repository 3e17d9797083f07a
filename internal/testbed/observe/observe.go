// Package observe records what a consumer of a test topic receives as
// txmsg messages, for the conformance suites of txmsg/txmsgtest.
package observe

import (
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/internal/rmqmsg"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
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

// Message is ext as a txmsg message (see [rmqmsg.Received]).
func Message(ext *primitive.MessageExt) *txmsg.Message { return rmqmsg.Received(ext).Message }

package txrmq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// TestRequeueParkedReachesOnlyTheGroupThatParkedIt: a parked message is
// replayed to the group that parked it, through its retry topic. Another
// group subscribed to the same topic never receives it: had the replay
// gone to the topic, a group whose inbox no longer held the message (its
// rows purged) would have applied it a second time.
func TestRequeueParkedReachesOnlyTheGroupThatParkedIt(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	var mu sync.Mutex
	seenBy := map[string][]string{} // group → message IDs handled
	startGroup := func(group string) {
		cfg := b.config()
		cfg.Group = group
		b.watch(func(g string, r *txmsg.Received, o txmsg.Outcome, err error) {
			if g == group && err == nil && o == txmsg.OutcomeHandled {
				mu.Lock()
				defer mu.Unlock()
				seenBy[group] = append(seenBy[group], r.Message.ID)
			}
		})
		b.start(cfg, txmsg.Handle(b.topicOf(), func(context.Context, *gorm.DB, txmsg.Delivery[consumerEvent]) error { return nil }))
	}
	parker, other := b.group, b.group+"_other"
	startGroup(parker)
	startGroup(other)
	saw := func(group, id string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range seenBy[group] {
			if s == id {
				return true
			}
		}
		return false
	}

	// Both groups are live: an ordinary message reaches both.
	first := b.message(consumerEvent{N: 1})
	b.publish(first)
	require.Eventually(t, func() bool { return saw(parker, first.ID) && saw(other, first.ID) }, consumerWait, consumerTick)

	// The parker parked a message (a handler bug since fixed, say); the
	// other group handled it long ago and its inbox row is purged.
	parked := b.message(consumerEvent{N: 2})
	require.NoError(t, driver.Park(b.inbox, context.Background(), parker,
		&txmsg.Received{Message: parked, BrokerMessageID: "0A0B0C0D00000000000000000000AA01", Attempt: 1}, errors.New("handler bug")))

	done, err := b.inbox.RequeueParked(context.Background(), b.pub, parker, parked.ID)
	require.NoError(t, err)
	require.Equal(t, []txmsg.RequeuedParked{{ID: parked.ID, Topic: b.topic, Group: parker, Deleted: 1}}, done)
	require.Eventually(t, func() bool { return saw(parker, parked.ID) }, consumerWait, consumerTick, "the parking group handles the replay")
	require.Never(t, func() bool { return saw(other, parked.ID) }, 3*time.Second, 100*time.Millisecond,
		"the replay reached a group that did not park it")
	rows, err := b.inbox.Parked(context.Background(), txmsg.ParkedFilter{IDs: []string{parked.ID}})
	require.NoError(t, err)
	require.Empty(t, rows)
}

// A group the broker does not know is refused, and the row stays parked.
func TestRequeueParkedToAnUnknownGroupIsRefused(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	msg := b.message(consumerEvent{N: 3})
	ghost := b.group + "_never_started"
	require.NoError(t, driver.Park(b.inbox, context.Background(), ghost,
		&txmsg.Received{Message: msg, BrokerMessageID: "0A0B0C0D00000000000000000000AA02", Attempt: 1}, errors.New("bug")))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.inbox.RequeueParked(ctx, b.pub, ghost, msg.ID)
	require.Error(t, err)
	require.ErrorContains(t, err, ghost)
	rows, err := b.inbox.Parked(context.Background(), txmsg.ParkedFilter{IDs: []string{msg.ID}})
	require.NoError(t, err)
	require.Len(t, rows, 1, "a refused replay keeps its row")
}

package txmsg_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// park parks one message per id for group, with body "raw-<id>".
func park(t *testing.T, in *txmsg.Inbox, group string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r := received(id, "raw-"+id)
		r.Message.Keys = []string{"k1", "k2"}
		r.Message.Properties = map[string]string{"tenant": "acme", txmsg.PropertyID: id}
		require.NoError(t, driver.Park(in, context.Background(), group, r, txmsg.ErrDecode))
	}
}

func parkedIDs(t *testing.T, in *txmsg.Inbox, f txmsg.ParkedFilter) []string {
	t.Helper()
	rows, err := in.Parked(context.Background(), f)
	require.NoError(t, err)
	var out []string
	for _, r := range rows {
		out = append(out, r.ConsumerGroup+"/"+r.MsgID)
	}
	return out
}

func TestParkedListDeleteAndPurge(t *testing.T) {
	t.Parallel()
	in, db := newInbox(t)
	ctx := context.Background()
	_, parkedTable := in.Tables()
	park(t, in, "g1", "a", "b", "c")
	park(t, in, "g2", "a", "d")

	require.Equal(t, []string{"g1/a", "g1/b", "g1/c", "g2/a", "g2/d"}, parkedIDs(t, in, txmsg.ParkedFilter{}))
	require.Equal(t, []string{"g2/a", "g2/d"}, parkedIDs(t, in, txmsg.ParkedFilter{Group: "g2"}))
	require.Equal(t, []string{"g1/a", "g2/a"}, parkedIDs(t, in, txmsg.ParkedFilter{IDs: []string{"a", "zz"}}))
	require.Equal(t, []string{"g1/a", "g1/b"}, parkedIDs(t, in, txmsg.ParkedFilter{Limit: 2}))
	_, err := in.Parked(ctx, txmsg.ParkedFilter{Limit: -1})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)

	counts, err := in.ParkedByGroup(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"g1": 3, "g2": 2}, counts)

	n, err := in.DeleteParked(ctx, "g2", "a")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = in.DeleteParked(ctx, "")
	require.NoError(t, err)
	require.Zero(t, n, "no IDs deletes nothing")
	require.Equal(t, []string{"g1/a", "g1/b", "g1/c", "g2/d"}, parkedIDs(t, in, txmsg.ParkedFilter{}))

	// By age: b and d were parked two hours ago.
	require.NoError(t, db.Table(parkedTable).Where("msg_id IN ?", []string{"b", "d"}).
		Update("parked_at", time.Now().UTC().Add(-2*time.Hour)).Error)
	n, err = in.PurgeParked(ctx, time.Hour, 0, "g2")
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "only g2's old one")
	n, err = in.PurgeParked(ctx, time.Hour, 1, "")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, []string{"g1/a", "g1/c"}, parkedIDs(t, in, txmsg.ParkedFilter{}))
	_, err = in.PurgeParked(ctx, -time.Second, 0, "")
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	n, err = in.PurgeParked(ctx, 0, 0, "")
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "age 0 purges all of them")
	require.Empty(t, parkedIDs(t, in, txmsg.ParkedFilter{}))
}

func TestParkedRowMessageRebuildsTheMessage(t *testing.T) {
	t.Parallel()
	in, _ := newInbox(t)
	park(t, in, "g", "m1")
	rows, err := in.Parked(context.Background(), txmsg.ParkedFilter{})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	m, err := rows[0].Message()
	require.NoError(t, err)
	require.Equal(t, &txmsg.Message{ID: "m1", Topic: "events", Keys: []string{"k1", "k2"}, Body: []byte("raw-m1"),
		Properties: map[string]string{"tenant": "acme"}}, m, "reserved properties are dropped; sending sets them again")

	bad := rows[0]
	bad.Properties = "{not json"
	_, err = bad.Message()
	require.ErrorContains(t, err, "unreadable properties")
}

// memPub records what it publishes; fail makes Publish fail for those IDs.
type memPub struct {
	mu     sync.Mutex
	sent   []*txmsg.Message
	groups []string
	fail   map[string]bool
	during func(m *txmsg.Message)
}

// PublishToGroup records m with the group it was sent to.
func (p *memPub) PublishToGroup(ctx context.Context, group string, m *txmsg.Message) error {
	if err := p.Publish(ctx, m); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.groups = append(p.groups, group)
	return nil
}

// topicOnly publishes to topics only: it cannot reach one group.
type topicOnly struct{}

func (topicOnly) Publish(context.Context, ...*txmsg.Message) error { return nil }

func (p *memPub) Publish(_ context.Context, msgs ...*txmsg.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		if p.fail[m.ID] {
			return errors.New("broker says no")
		}
		if p.during != nil {
			p.during(m)
		}
		p.sent = append(p.sent, m)
	}
	return nil
}

func TestRequeueParkedPublishesThenDeletes(t *testing.T) {
	t.Parallel()
	in, _ := newInbox(t)
	ctx := context.Background()
	park(t, in, "g1", "a", "b", "c")
	park(t, in, "g2", "a")
	pub := &memPub{fail: map[string]bool{"c": true}}

	done, err := in.RequeueParked(ctx, pub, "", "a", "b", "c", "missing")
	require.ErrorContains(t, err, "replay c to group g1")
	require.ErrorContains(t, err, "broker says no")
	require.Equal(t, []txmsg.RequeuedParked{
		{ID: "a", Topic: "events", Group: "g1", Deleted: 1},
		{ID: "b", Topic: "events", Group: "g1", Deleted: 1},
		{ID: "a", Topic: "events", Group: "g2", Deleted: 1},
	}, done)
	require.Equal(t, []string{"g1", "g1", "g2"}, pub.groups, "each parked row to its own group, and to it alone")
	require.Equal(t, "a", pub.sent[0].ID)
	require.Equal(t, []byte("raw-a"), pub.sent[0].Body)
	require.Equal(t, []string{"g1/c"}, parkedIDs(t, in, txmsg.ParkedFilter{}), "a failed publish keeps its row")

	// Of one group only.
	park(t, in, "g1", "a")
	park(t, in, "g2", "a")
	done, err = in.RequeueParked(ctx, pub, "g2", "a")
	require.NoError(t, err)
	require.Equal(t, []txmsg.RequeuedParked{{ID: "a", Topic: "events", Group: "g2", Deleted: 1}}, done)
	require.Equal(t, []string{"g1/c", "g1/a"}, parkedIDs(t, in, txmsg.ParkedFilter{}), "oldest first: a was parked again after c")

	_, err = in.RequeueParked(ctx, nil, "", "a")
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	_, err = in.RequeueParked(ctx, topicOnly{}, "", "a")
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "a publisher that can only reach the topic is refused")
	require.ErrorContains(t, err, "every group subscribed to it")
	require.Equal(t, []string{"g1/c", "g1/a"}, parkedIDs(t, in, txmsg.ParkedFilter{}), "a refused requeue deletes nothing")
}

// TestRequeueParkedKeepsAMessageParkedAgain: the republished message
// reaches a consumer that cannot decode it either and parks it again
// before the requeue has deleted the old row. The new parked row must
// survive: deleting it would lose the message, acknowledged as parked.
func TestRequeueParkedKeepsAMessageParkedAgain(t *testing.T) {
	t.Parallel()
	in, _ := newInbox(t)
	ctx := context.Background()
	park(t, in, "g", "x")
	var wg sync.WaitGroup
	pub := &memPub{during: func(m *txmsg.Message) {
		// The consumer parks it again from its own connection while the
		// broker has the message and the requeue has not finished.
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = driver.Park(in, context.Background(), "g", &txmsg.Received{Message: m, BrokerMessageID: "again", Attempt: 1}, txmsg.ErrDecode)
		}()
		// Give the Park time to reach the database before the requeue
		// goes on. If it is late, it parks after the requeue and the test
		// passes without having raced; it never fails because of timing.
		time.Sleep(200 * time.Millisecond)
	}}
	done, err := in.RequeueParked(ctx, pub, "g", "x")
	require.NoError(t, err)
	require.Len(t, done, 1)
	wg.Wait()
	rows, err := in.Parked(ctx, txmsg.ParkedFilter{})
	require.NoError(t, err)
	require.Len(t, rows, 1, "the message parked again is still parked")
	require.Equal(t, "again", rows[0].BrokerMessageID)
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// The tests in this file publish through the real broker and watch
// deliveries with a real push consumer.

// bridgeOnce installs the rocketmq adapter's process-wide log bridge
// before any client of this test binary starts: the adapter sets the
// client's global logger in its first NewPublisher, and doing so while
// another client runs is a data race.
var bridgeOnce sync.Once

// brokerEnv is newEnv plus a fresh topic on the test broker.
func brokerEnv(t *testing.T) *env {
	t.Helper()
	testbed.QuietClientLogs()
	testbed.RequireBroker(t)
	bridgeOnce.Do(func() {
		pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: "txmsg_outbox_test_bridge"})
		require.NoError(t, err)
		require.NoError(t, pub.Start(context.Background()))
		_ = pub.Close(context.Background())
	})
	e := newEnv(t, Config{})
	e.topic = testbed.Topic(t)
	return e
}

// brokerPublisher starts a real publisher, closed when the test ends
// (after the relays that use it, which start later).
func brokerPublisher(t *testing.T) *txrmq.Publisher {
	t.Helper()
	// No test logger here: the client's log bridge is process-wide and
	// outlives the test.
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "pub")})
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

// recording wraps a publisher and records what it acknowledged.
type recording struct {
	inner txmsg.Publisher
	rec   *memPublisher
}

func (p recording) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	err := p.inner.Publish(ctx, msgs...)
	var be *txmsg.BatchError
	for i, m := range msgs {
		if err == nil || (errors.As(err, &be) && be.Errs[i] == nil) {
			_ = p.rec.Publish(ctx, m)
		}
	}
	return err
}

// TestBrokerEndToEnd: Transact commits, the relay publishes through the
// broker, a consumer receives the event with its txmsg ID.
func TestBrokerEndToEnd(t *testing.T) {
	t.Parallel()
	e := brokerEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	start(t, e.relay(brokerPublisher(t), RelayConfig{}))

	m := &txmsg.Message{
		Topic: e.topic, Tag: "created", Keys: []string{"order-7"}, ShardingKey: "cust-1",
		Body: []byte(`{"order":7}`), Properties: map[string]string{"source": "outbox-test"},
	}
	r, err := e.ob.Transact(context.Background(), m, createOrder("order-7"))
	require.NoError(t, err)
	_, err = e.ob.Transact(context.Background(), e.msg("never"), func(context.Context, *gorm.DB) error {
		return errors.New("rolled back")
	})
	require.Error(t, err)

	require.Eventually(t, func() bool { return obs.First(r.ID) != nil }, 30*time.Second, 50*time.Millisecond)
	got := obs.First(r.ID)
	require.Equal(t, r.ID, got.GetProperty(txmsg.PropertyID))
	require.Equal(t, `{"order":7}`, string(got.Body))
	require.Equal(t, "created", got.GetTags())
	require.ElementsMatch(t, []string{r.ID, "order-7"}, strings.Fields(got.GetKeys()))
	require.Equal(t, "outbox-test", got.GetProperty("source"))
	require.Equal(t, "cust-1", got.GetProperty(txmsg.PropertyShardingKey))
	require.Eventually(t, func() bool { return e.stats().Sent == 1 }, waitFor, tick)
	require.Never(t, func() bool { return obs.Distinct() > 1 }, 300*time.Millisecond, tick, "the rolled-back event never arrives")
}

// TestBrokerCrashRepublishIsDeduped: the relay dies after publishing and
// before marking; the rows go out again, and a consumer deduping through
// the txmsg inbox applies each event once.
func TestBrokerCrashRepublishIsDeduped(t *testing.T) {
	t.Parallel()
	e := brokerEnv(t)
	inbox, err := txmsg.NewInbox(e.db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(context.Background()))
	require.NoError(t, e.db.Exec("CREATE TABLE effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_id VARCHAR(64) NOT NULL)").Error)
	group := testbed.Name(t, "dedupe")
	obs := testbed.Observe(t, e.topic, func(m *primitive.MessageExt) error {
		id := m.GetProperty(txmsg.PropertyID)
		_, err := driver.Run(inbox, context.Background(), group, m.Topic, id, func(ctx context.Context, tx *gorm.DB) error {
			return tx.Exec("INSERT INTO effects (msg_id) VALUES (?)", id).Error
		})
		return err
	})

	const n = 20
	ids := e.send(n, "crash")
	r := e.relay(brokerPublisher(t), RelayConfig{})
	crash := errors.New("relay killed")
	r.afterPublish = func(context.Context, []*txmsg.Message) error { return crash }
	require.ErrorIs(t, r.Run(context.Background()), crash)
	require.EqualValues(t, n, e.stats().Pending, "published but never marked")

	r.afterPublish = nil
	start(t, r)
	require.Eventually(t, func() bool { return e.stats().Sent == n }, waitFor, tick)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if obs.Count(id) < 2 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every event was delivered twice")
	for _, id := range ids {
		var effects int64
		require.NoError(t, e.db.Table("effects").Where("msg_id = ?", id).Count(&effects).Error)
		require.EqualValues(t, 1, effects, "effects of %s", id)
	}
}

// TestBrokerTwoRelays: two relays, each with its own publisher, drain the
// outbox through the broker without publishing any event twice.
func TestBrokerTwoRelays(t *testing.T) {
	t.Parallel()
	e := brokerEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	const n = 500
	e.enqueue(n, func(i int) *txmsg.Message { return e.msg(fmt.Sprintf("two-%d", i)) })
	rec := newMemPublisher()
	for i := range 2 {
		start(t, e.relay(recording{brokerPublisher(t), rec}, RelayConfig{BatchSize: 50, Name: fmt.Sprintf("broker-relay-%d", i)}))
	}
	require.Eventually(t, func() bool { return obs.Distinct() == n }, 45*time.Second, 50*time.Millisecond)
	// A publish is recorded once the broker's answer is back, which may
	// come after the observer got the message.
	require.Eventually(t, func() bool { return rec.distinct() == n }, 30*time.Second, tick, "every publish the broker acknowledged is recorded")
	require.Empty(t, rec.duplicates())
	require.Eventually(t, func() bool { return e.stats().Sent == n }, waitFor, tick)
}

// TestBrokerOrdered: two ordered relays publish 200 events over 5 keys
// through the broker; each key's events are stored on one queue in commit
// order. (The order is read from queue offsets rather than from an orderly
// consumer: the client's orderly consumer has a data race that -race
// reports.)
func TestBrokerOrdered(t *testing.T) {
	t.Parallel()
	e := brokerEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	start(t, e.relay(brokerPublisher(t), orderedConfig("ordered-a")))
	start(t, e.relay(brokerPublisher(t), orderedConfig("ordered-b")))
	const keys, perKeyN = 5, 40
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perKeyN {
				e.sendKeyed(fmt.Sprintf("key-%d", k), i)
			}
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool { return obs.Distinct() == keys*perKeyN }, 45*time.Second, 50*time.Millisecond)

	stored := obs.Order()
	queues := map[string]map[int]bool{}
	for _, m := range stored {
		k := m.GetProperty(txmsg.PropertyShardingKey)
		if queues[k] == nil {
			queues[k] = map[int]bool{}
		}
		queues[k][m.Queue.QueueId] = true
	}
	for k, q := range queues {
		require.Len(t, q, 1, "all of %s on one queue", k)
	}
	sort.SliceStable(stored, func(i, j int) bool { return stored[i].QueueOffset < stored[j].QueueOffset })
	msgs := make([]*txmsg.Message, 0, len(stored))
	for _, m := range stored {
		msgs = append(msgs, &txmsg.Message{Body: m.Body, ShardingKey: m.GetProperty(txmsg.PropertyShardingKey)})
	}
	want := make([]int, perKeyN)
	for i := range want {
		want[i] = i
	}
	for k, seqs := range perKey(t, msgs) {
		require.Equal(t, want, seqs, "stored order of %s", k)
	}
}

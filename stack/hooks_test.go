package stack

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// hookCounter implements every txmsg hook interface and counts the events
// it sees, by kind and txmsg ID ("" for the events that have none).
type hookCounter struct {
	mu     sync.Mutex
	counts map[string]map[string]int
	errs   map[string]map[string]error // the last error of kind and ID
}

func (h *hookCounter) add(kind, id string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts, h.errs = map[string]map[string]int{}, map[string]map[string]error{}
	}
	if h.counts[kind] == nil {
		h.counts[kind], h.errs[kind] = map[string]int{}, map[string]error{}
	}
	h.counts[kind][id]++
	h.errs[kind][id] = err
}

// count returns how many events of kind concerned id.
// await waits until the hooks saw kind for id, failing with what (and
// every event seen) after hookWait.
func (h *hookCounter) await(t *testing.T, kind, id, what string) {
	t.Helper()
	require.Eventually(t, func() bool { return h.count(kind, id) > 0 }, hookWait, 50*time.Millisecond, "%s; hooks: %s", what, h)
}

func (h *hookCounter) count(kind, id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[kind][id]
}

// lastErr returns the error of the last event of kind about id.
func (h *hookCounter) lastErr(kind, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.errs[kind][id]
}

// String lists the counts by kind, for failure messages.
func (h *hookCounter) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for kind, ids := range h.counts {
		n := 0
		for _, c := range ids {
			n += c
		}
		out = append(out, fmt.Sprintf("%s=%d", kind, n))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func (h *hookCounter) BeforeSend(_ context.Context, m *txmsg.Message) { h.add("BeforeSend", m.ID, nil) }
func (h *hookCounter) OnHalfSent(_ context.Context, m *txmsg.Message, err error, _ time.Duration) {
	h.add("OnHalfSent", m.ID, err)
}
func (h *hookCounter) OnLocalDone(_ context.Context, m *txmsg.Message, _ txmsg.LocalState, err error, _ time.Duration) {
	h.add("OnLocalDone", m.ID, err)
}
func (h *hookCounter) OnCheckBack(_ string, txID, _ string, _ txmsg.LocalState, err error, _ time.Duration) {
	h.add("OnCheckBack", txID, err)
}
func (h *hookCounter) OnHeld(_ string, txID, _ string, err error) { h.add("OnHeld", txID, err) }
func (h *hookCounter) OnRelayBatch(_ context.Context, _, _ string, size, failed int, _ time.Duration) {
	h.add("OnRelayBatch", "", nil)
}
func (h *hookCounter) OnRelayUnavailable(_ context.Context, _, _ string, _ int, err error) {
	h.add("OnRelayUnavailable", "", err)
}
func (h *hookCounter) BeforeHandle(ctx context.Context, _ string, r *txmsg.Received) context.Context {
	h.add("BeforeHandle", r.Message.ID, nil)
	return ctx
}
func (h *hookCounter) OnConsumed(_ context.Context, _ string, r *txmsg.Received, _ txmsg.Outcome, err error, _ time.Duration) {
	h.add("OnConsumed", r.Message.ID, err)
}

var (
	_ txmsg.HookBeforeSend       = (*hookCounter)(nil)
	_ txmsg.HookHalfSent         = (*hookCounter)(nil)
	_ txmsg.HookLocalDone        = (*hookCounter)(nil)
	_ txmsg.HookCheckBack        = (*hookCounter)(nil)
	_ txmsg.HookHeld             = (*hookCounter)(nil)
	_ txmsg.HookRelayBatch       = (*hookCounter)(nil)
	_ txmsg.HookRelayUnavailable = (*hookCounter)(nil)
	_ txmsg.HookBeforeHandle     = (*hookCounter)(nil)
	_ txmsg.HookConsumed         = (*hookCounter)(nil)
)

// unknownListener answers UNKNOWN to everything, as a producer that dies
// right after its half send leaves it.
type unknownListener struct{}

func (unknownListener) ExecuteLocalTransaction(*primitive.Message) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

func (unknownListener) CheckLocalTransaction(*primitive.MessageExt) primitive.LocalTransactionState {
	return primitive.UnkonwnState
}

// orphanHalfMessage stores a half message of id to topic in group and
// leaves it unanswered: the broker asks the group's live producers.
func orphanHalfMessage(t *testing.T, group, topic, id string) {
	t.Helper()
	tp, err := rmq.NewTransactionProducer(unknownListener{},
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{testbed.NameServer()})),
		producer.WithGroupName(group),
		producer.WithInstanceName("orphan-"+txmsg.NewID()))
	require.NoError(t, err)
	require.NoError(t, tp.Start())
	m := primitive.NewMessage(topic, []byte(`{"n":0}`))
	m.WithProperty(txmsg.PropertyID, id)
	m.WithProperty(txmsg.PropertyTopic, topic)
	res, err := tp.SendMessageInTransaction(context.Background(), m)
	require.NoError(t, err)
	require.Equal(t, primitive.SendOK, res.Status)
	require.NoError(t, tp.Shutdown())
}

// event is the body of the hooks tests' messages.
type event struct {
	N int `json:"n"`
}

// startConsumer runs a consumer of topic whose inbox calls hooks, as the
// service that built the stack would.
func startConsumer(t *testing.T, db *gorm.DB, topic string, hooks txmsg.Hooks) {
	t.Helper()
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Hooks: hooks})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(t.Context()))
	route := txmsg.Handle(txmsg.Topic[event]{Name: topic}, func(context.Context, *gorm.DB, txmsg.Delivery[event]) error { return nil })
	c, err := txrmq.NewConsumer(inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "cg")})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
}

const hookWait = 2 * time.Minute

// Config.Hooks reach every part of a stack, in both modes: the producer's
// sends and local transactions, its check-back answers, the relays'
// batches and their publisher's check-back answers, the sweeper's held
// message and its publisher's check-back answers. A consumer built with
// the same hooks counts what it consumed, so one set of hooks sees an
// event from the send to its handling.
func TestStackHooksReachEveryPart(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)

	t.Run("transactional", func(t *testing.T) {
		t.Parallel()
		db := testbed.DB(t)
		topic := testbed.Topic(t)
		group := testbed.Name(t, "pg")
		require.NoError(t, db.AutoMigrate(&order{}))
		hooks := &hookCounter{}
		s, err := Transactional(db, TransactionalConfig{
			Config: Config{
				RocketMQ: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: group,
				Topics: []string{topic},
				Hooks:  txmsg.Hooks{hooks},
			},
			// The test broker's whole check window is a few seconds, so
			// the barrier may be purged up to a second ago.
			Checker: checker.Config{CheckWindow: time.Second},
			Sweeper: txrmq.SweeperConfig{HoldFor: time.Second, RetryDelayLevel: 1},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		ctx := t.Context()
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Start(ctx))
		startConsumer(t, db, topic, txmsg.Hooks{hooks})

		// The producer: a send, its half send and local transaction; the
		// consumer handles the event.
		id := txmsg.NewID()
		_, err = s.Transact(ctx, &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{"n":1}`)}, insertOrder(&id))
		require.NoError(t, err)
		require.Equal(t, 1, hooks.count("BeforeSend", id))
		require.Equal(t, 1, hooks.count("OnHalfSent", id))
		require.Equal(t, 1, hooks.count("OnLocalDone", id))
		hooks.await(t, "OnConsumed", id, "the consumer's hooks saw nothing")
		require.Positive(t, hooks.count("BeforeHandle", id))

		// The sweeper's publisher: a half message of the sweeper's group
		// is checked back there, and answered UNKNOWN (it has no checker).
		toSweeperPub := txmsg.NewID()
		orphanHalfMessage(t, group+SweeperSuffix, topic, toSweeperPub)
		hooks.await(t, "OnCheckBack", toSweeperPub, "the sweeper's publisher answered a check-back unseen by the stack's hooks")
		require.ErrorIs(t, hooks.lastErr("OnCheckBack", toSweeperPub), txrmq.ErrNoChecker)

		// The sweeper: after a purge, a half message of the producer group
		// without a barrier row has no answer. The producer answers its
		// check-backs UNKNOWN, the broker discards it, and the sweeper
		// holds it for an operator.
		_, err = s.Checker().Purge(ctx, time.Second, 0)
		require.NoError(t, err)
		held := txmsg.NewID()
		orphanHalfMessage(t, group, topic, held)
		hooks.await(t, "OnCheckBack", held, "no check-back reached the producer")
		require.ErrorIs(t, hooks.lastErr("OnCheckBack", held), checker.ErrBeyondPurgeHorizon)
		hooks.await(t, "OnHeld", held, "the sweeper held the discarded half message unseen by the stack's hooks")
		require.ErrorIs(t, hooks.lastErr("OnHeld", held), checker.ErrBeyondPurgeHorizon)
	})

	t.Run("outbox", func(t *testing.T) {
		t.Parallel()
		db := testbed.DB(t)
		topic := testbed.Topic(t)
		group := testbed.Name(t, "pg")
		require.NoError(t, db.AutoMigrate(&order{}))
		hooks := &hookCounter{}
		s, err := Outbox(db, OutboxConfig{Config: Config{
			RocketMQ: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: group,
			Topics: []string{topic},
			Hooks:  txmsg.Hooks{hooks},
		}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		ctx := t.Context()
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Start(ctx))
		startConsumer(t, db, topic, txmsg.Hooks{hooks})

		// The writer: a send and its local transaction; a relay publishes
		// the row, the consumer handles the event.
		id := txmsg.NewID()
		_, err = s.Transact(ctx, &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{"n":1}`)}, insertOrder(&id))
		require.NoError(t, err)
		require.Equal(t, 1, hooks.count("BeforeSend", id))
		require.Equal(t, 1, hooks.count("OnLocalDone", id))
		hooks.await(t, "OnConsumed", id, "the consumer's hooks saw nothing")
		require.Positive(t, hooks.count("BeforeHandle", id))
		require.Positive(t, hooks.count("OnRelayBatch", ""))

		// The relays' publisher shares the producer group: a half message
		// left there (a transactional producer of the group that died) is
		// checked back to it, and answered UNKNOWN without a Checker.
		checked := txmsg.NewID()
		orphanHalfMessage(t, group, topic, checked)
		hooks.await(t, "OnCheckBack", checked, "the relays' publisher answered a check-back unseen by the stack's hooks")
		require.True(t, errors.Is(hooks.lastErr("OnCheckBack", checked), txrmq.ErrNoChecker))
	})
}

package stack

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// The quick start, in both modes, with the caller's gorm logger recording
// what it would print as errors: events sent, each delivered twice (the
// second copy is dropped by the inbox), then everything closed. txmsg's
// expected paths (the inbox's duplicate, the shutdown) print no error.
// duplicateCounter is a txmsg.HookConsumed that counts the duplicates the
// inbox drops.
type duplicateCounter struct{ n *atomic.Int32 }

func (d duplicateCounter) OnConsumed(_ context.Context, _ string, _ *txmsg.Received, o txmsg.Outcome, _ error, _ time.Duration) {
	if o == txmsg.OutcomeDuplicate {
		d.n.Add(1)
	}
}

func TestQuickStartPrintsNoGormErrors(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ModeTransactional, ModeOutbox} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testbed.RequireBroker(t)
			base := testbed.DB(t)
			db, rec := testbed.WithGormErrors(base)
			topic := testbed.Topic(t)
			require.NoError(t, base.AutoMigrate(&order{}))
			cfg := Config{RocketMQ: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "pg"), Topics: []string{topic}}
			var s *Stack
			var err error
			if mode == ModeTransactional {
				s, err = Transactional(db, TransactionalConfig{Config: cfg})
			} else {
				s, err = Outbox(db, OutboxConfig{Config: cfg})
			}
			require.NoError(t, err)
			var duplicates atomic.Int32
			inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Hooks: txmsg.Hooks{duplicateCounter{&duplicates}}})
			require.NoError(t, err)
			handled := make(chan string, 100)
			consumer, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[map[string]int]{Name: topic}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[map[string]int]) error {
				handled <- d.Message.ID
				return nil
			})}, txrmq.ConsumerConfig{
				Conn: cfg.RocketMQ, Group: testbed.Name(t, "cg"),
			})
			require.NoError(t, err)
			ctx := t.Context()
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, inbox.Migrate(ctx))
			require.NoError(t, s.Start(ctx))
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			require.NoError(t, consumer.Start(ctx))
			t.Cleanup(func() { _ = consumer.Close(context.Background()) })
			pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: cfg.RocketMQ, Group: testbed.Name(t, "dup")})
			require.NoError(t, err)
			require.NoError(t, pub.Start(ctx))
			t.Cleanup(func() { _ = pub.Close(context.Background()) })

			const n = 5
			sent := map[string]bool{}
			for range n {
				id := txmsg.NewID()
				msg := &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{"n":1}`)}
				_, err := s.Transact(ctx, msg, insertOrder(&id))
				require.NoError(t, err)
				sent[id] = true
			}
			got := map[string]bool{}
			for len(got) < n {
				select {
				case id := <-handled:
					got[id] = true
				case <-time.After(time.Minute):
					t.Fatalf("%d of %d events handled within a minute", len(got), n)
				}
			}
			require.Equal(t, sent, got)
			// A second copy of each, as a relay or a check-back may
			// publish: the inbox drops them.
			var copies []*txmsg.Message
			for id := range sent {
				copies = append(copies, &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{"n":1}`)})
			}
			require.NoError(t, pub.Publish(ctx, copies...))
			require.Eventually(t, func() bool { return duplicates.Load() >= n }, time.Minute, 50*time.Millisecond)

			require.NoError(t, consumer.Close(context.Background()))
			require.NoError(t, s.Close(context.Background()))
			require.Empty(t, rec.All())
		})
	}
}

package txrmq_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// failedTries counts the attempts that failed (a txmsg.HookConsumed).
type failedTries struct {
	mu sync.Mutex
	n  int
}

func (f *failedTries) OnConsumed(_ context.Context, _ string, _ *txmsg.Received, _ txmsg.Outcome, err error, _ time.Duration) {
	if err != nil {
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
	}
}

func (f *failedTries) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// A database outage many times longer than a consumer's whole retry
// budget (one retry after 1 s; 50–100 ms for the ordered consumer) sends
// nothing to the broker's dead-letter topic or the parked table: attempts
// that fail while the inbox's database does not answer count no attempt, and once the
// database is back the message is handled on its first counted attempt,
// once. Without that, the concurrent consumer's message goes to
// %DLQ%<group> and is never handled here, and the ordered consumer parks
// it in the parked table as soon as the database answers.
func TestConsumerOutageLongerThanRetryBudget(t *testing.T) {
	t.Parallel()
	for _, kind := range consumerKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := newConsumerBed(t)
			// The bed's tables, reached through a proxy the test cuts.
			proxy, pdb := testbed.ProxiedDB(t, b.dsn)
			tries := &failedTries{}
			inbox, err := txmsg.NewInbox(pdb, txmsg.InboxConfig{Hooks: txmsg.Hooks{tries, b}})
			require.NoError(t, err)
			logs := &lockedBuffer{}
			cfg := b.config()
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			cfg.MaxReconsumeTimes = 1
			var handled sync.Map
			route := txmsg.Handle(b.topicOf(), func(_ context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
				if err := tx.Create(&consumerEffect{EventID: d.Message.ID, Part: d.Attempt}).Error; err != nil {
					return err
				}
				handled.Store(d.Message.ID, d.Attempt)
				return nil
			})
			switch kind {
			case "concurrent":
				c, err := txrmq.NewConsumer(inbox, []txmsg.Route{route}, cfg)
				require.NoError(t, err)
				require.NoError(t, c.Start(context.Background()))
				t.Cleanup(func() { _ = c.Close(context.Background()) })
			case "ordered":
				oc, err := txrmq.NewOrderedConsumer(inbox, []txmsg.Route{route}, txrmq.OrderedConsumerConfig{
					Conn: cfg.Conn, Group: cfg.Group, MaxReconsumeTimes: 1, MinBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
				})
				require.NoError(t, err)
				require.NoError(t, oc.Start(context.Background()))
				t.Cleanup(func() { _ = oc.Close(context.Background()) })
			}

			proxy.Cut()
			m := b.message(consumerEvent{N: 1})
			b.publish(m)
			require.Eventually(t, func() bool { return tries.count() > 0 }, consumerWait, consumerTick,
				"the message was not tried during the outage; logs:\n%s", logs)
			time.Sleep(5 * time.Second) // the retry budget, several times over
			_, done := handled.Load(m.ID)
			require.False(t, done)
			t.Logf("attempts that failed during the outage: %d", tries.count())
			proxy.Restore()

			require.Eventually(t, func() bool { return b.handled(m.ID) }, consumerWait, consumerTick,
				"not handled after the outage; logs:\n%s", logs)
			attempt, _ := handled.Load(m.ID)
			require.Equal(t, 1, attempt, "the outage counted attempts")
			require.EqualValues(t, 1, b.effects(m.ID))
			require.EqualValues(t, 1, b.inboxRows(m.ID))
			_, dead := inbox.Tables()
			require.Zero(t, b.count(b.db.Table(dead).Where("msg_id = ?", m.ID)), "parked in the parked table")
			for _, s := range b.of(m.ID) {
				require.NotEqual(t, txmsg.OutcomeParked, s.outcome, fmt.Sprintf("%+v", s))
			}
		})
	}
}

package driver_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// consumedHook records OnConsumed calls.
type consumedHook struct {
	mu       sync.Mutex
	outcomes []txmsg.Outcome
}

func (h *consumedHook) OnConsumed(_ context.Context, _ string, _ *txmsg.Received, o txmsg.Outcome, err error, _ time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.outcomes = append(h.outcomes, o)
	}
}

func TestInboxParkFailed(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	hook := &consumedHook{}
	in, err := txmsg.NewInbox(db, txmsg.InboxConfig{Hooks: txmsg.Hooks{hook}})
	require.NoError(t, err)
	require.NoError(t, in.Migrate(context.Background()))
	id := txmsg.NewID()
	r := received(id, `{"n":1}`)
	r.Attempt = 17
	cause := errors.New("balance would go negative")
	require.NoError(t, driver.ParkFailed(in, context.Background(), "g", r, cause))
	require.NoError(t, driver.ParkFailed(in, context.Background(), "g", r, cause), "parking twice is a no-op")

	_, parkedTable := in.Tables()
	var rows []txmsg.ParkedRow
	require.NoError(t, db.Table(parkedTable).Find(&rows).Error)
	require.Len(t, rows, 1)
	require.Equal(t, id, rows[0].MsgID)
	require.Equal(t, "g", rows[0].ConsumerGroup)
	require.Equal(t, []byte(`{"n":1}`), rows[0].Body)
	require.Equal(t, 17, rows[0].Attempt)
	require.Equal(t, "handler failed 17 times, last error: balance would go negative", rows[0].Error)
	hook.mu.Lock()
	require.Equal(t, []txmsg.Outcome{txmsg.OutcomeParked, txmsg.OutcomeParked}, hook.outcomes)
	hook.mu.Unlock()

	require.ErrorIs(t, driver.ParkFailed(in, context.Background(), "g", nil, cause), txmsg.ErrInvalidMessage)
	require.ErrorIs(t, driver.ParkFailed(in, context.Background(), "g", &txmsg.Received{}, cause), txmsg.ErrInvalidMessage)
}

func received(id string, body string) *txmsg.Received {
	return &txmsg.Received{Message: &txmsg.Message{ID: id, Topic: "events", Body: []byte(body)}, BrokerMessageID: "b-" + id, Attempt: 1}
}

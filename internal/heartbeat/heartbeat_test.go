package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestBeat: the row follows the component's health and counters, a long
// error is cut, the rows of instances gone past Expiry are deleted, and
// Stop deletes the instance's own row.
func TestBeat(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	ctx := context.Background()
	require.NoError(t, fleet.Migrate(ctx, db, fleet.DefaultTable))
	// A row of an instance that died two hours ago.
	require.NoError(t, db.Exec("INSERT INTO "+fleet.DefaultTable+
		" (kind, name, instance, started_at, heartbeat_at) VALUES ('consumer', 'g', 'dead', UTC_TIMESTAMP(6) - INTERVAL 3 HOUR, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR)").Error)

	var failing atomic.Bool
	health := func(context.Context) error {
		if failing.Load() {
			return errors.New("cut off: " + strings.Repeat("é", 800))
		}
		return nil
	}
	counts := &Counters{}
	cfg := fleet.Config{Interval: 100 * time.Millisecond}.WithDefaults()
	b := Start(db, cfg, fleet.KindConsumer, "g", health, counts, slog.Default())
	require.NotNil(t, b)
	counts.Consumed(txmsg.OutcomeHandled, nil)
	counts.Consumed(txmsg.OutcomeHandled, nil)
	counts.Consumed(0, errors.New("boom"))
	row := func() (fleet.Instance, []fleet.Instance) {
		rows, err := fleet.List(ctx, db, fleet.DefaultTable)
		require.NoError(t, err)
		for _, r := range rows {
			if r.ID == b.id {
				return r, rows
			}
		}
		return fleet.Instance{}, rows
	}
	require.Eventually(t, func() bool {
		r, rows := row()
		return len(rows) == 1 && r.State == fleet.StateLive && r.Handled == 2 && r.Failed == 1
	}, 10*time.Second, 50*time.Millisecond, "no live row with the counts, or the dead instance's row is left")

	failing.Store(true)
	require.Eventually(t, func() bool {
		r, _ := row()
		return r.State == fleet.StateFailing && strings.HasPrefix(r.LastError, "cut off: ") && len(r.LastError) <= 1024
	}, 10*time.Second, 50*time.Millisecond, "the row never turned failing with the error cut")

	b.Stop(ctx)
	_, rows := row()
	require.Empty(t, rows, "Stop deletes the row")
	require.Nil(t, Start(db, fleet.Config{Interval: -1}.WithDefaults(), fleet.KindConsumer, "g", health, counts, slog.Default()), "a negative interval writes nothing")
}

package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/examples/orderservice/scenario"
	"github.com/txmsg/txmsg/internal/testbed"
)

// TestEndToEnd runs the demo's scenario, smaller, in both modes against
// the real broker and database: every committed order is decided exactly
// once, invalid ones leave no trace, and the stock adds up.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	// The RocketMQ client's logger is process-wide: the first component
	// built installs txmsg's bridge to it, for good, so it must not write
	// to t.Output(). Both modes are wired here, one after the other,
	// because creating topics and installing the bridge touch that logger
	// and are not safe to run concurrently.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	type env struct {
		cfg Config
		db  *gorm.DB
		app *App
	}
	var envs []env
	for _, mode := range []string{ModeTransactional, ModeOutbox} {
		db, dsn := testbed.DBWithDSN(t)
		cfg := Config{
			Mode:            mode,
			HTTPAddr:        "127.0.0.1:0",
			DSN:             dsn,
			NameServers:     []string{testbed.NameServer()},
			Topic:           testbed.Topic(t),
			ProducerGroup:   testbed.Name(t, "pg_"+mode),
			ConsumerGroup:   testbed.Name(t, "cg_"+mode),
			Seed:            true,
			Reconcile:       true,
			ShutdownTimeout: 20 * time.Second,
		}
		require.NoError(t, cfg.validate())
		app, cleanup, err := newApp(cfg, log)
		require.NoError(t, err)
		t.Cleanup(cleanup)
		envs = append(envs, env{cfg: cfg, db: db, app: app})
	}

	for _, e := range envs {
		t.Run(e.cfg.Mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 75*time.Second)
			defer cancel()
			startErr := e.app.Start(ctx)
			t.Cleanup(func() {
				sctx, cancel := context.WithTimeout(context.Background(), e.cfg.ShutdownTimeout)
				defer cancel()
				_ = e.app.Shutdown(sctx) // a no-op after the shutdown below
			})
			require.NoError(t, startErr)

			run, err := scenario.Drive(ctx, scenario.Options{BaseURL: "http://" + e.app.Addr(), Orders: 40})
			require.NoError(t, err)
			rep, err := scenario.Audit(ctx, e.db, run, 45*time.Second, nil)
			require.NoError(t, err)
			var out strings.Builder
			rep.Print(&out)
			t.Log("\n" + out.String())

			require.Empty(t, rep.Problems)
			require.Zero(t, rep.EventsLost)
			require.Zero(t, rep.DuplicateEffects)
			require.Equal(t, 40, run.Sent)
			require.Len(t, run.Created, 36)
			require.Equal(t, 4, run.RejectedByValidation)
			require.Zero(t, run.Failed)
			require.NotEmpty(t, run.OverStock)
			require.EqualValues(t, 36, rep.OrdersInDB)
			require.EqualValues(t, 36, rep.Confirmed+rep.Rejected)
			require.EqualValues(t, rep.Confirmed, rep.DeductionsApplied)
			require.GreaterOrEqual(t, rep.Rejected, int64(len(run.OverStock)))

			sctx, scancel := context.WithTimeout(context.Background(), e.cfg.ShutdownTimeout)
			defer scancel()
			require.NoError(t, e.app.Shutdown(sctx))
		})
	}
}

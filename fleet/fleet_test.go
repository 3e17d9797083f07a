package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	require.NoError(t, fleet.Config{}.WithDefaults().ValidateIn("consumer"))
	require.NoError(t, fleet.Config{Interval: -1}.WithDefaults().ValidateIn("consumer"), "negative: off")
	for cfg, want := range map[fleet.Config]string{
		{}: "fleet: Table",
		{Table: "bad name", Interval: time.Second, Expiry: time.Hour}:           "fleet: Table",
		{Table: "t", Expiry: time.Hour}:                                         "fleet: Interval",
		{Table: "t", Interval: time.Minute, Expiry: 2 * time.Minute}:            "fleet: Expiry",
		fleet.Config{Interval: time.Minute, Expiry: time.Minute}.WithDefaults(): "fleet: Expiry",
	} {
		require.ErrorIs(t, cfg.Validate(), txmsg.ErrInvalidConfig)
		err := cfg.ValidateIn("consumer")
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "%+v", cfg)
		require.ErrorContains(t, err, want)
		require.ErrorContains(t, err, "consumer: Heartbeat: ")
	}
}

// TestMigrateMatchesSQL: Migrate and fleet.sql create the same tables.
func TestMigrateMatchesSQL(t *testing.T) {
	t.Parallel()
	fromSQL := testbed.DB(t)
	testbed.ExecSQLFile(t, fromSQL, "fleet.sql")
	fromGorm := testbed.DB(t)
	ctx := context.Background()
	require.NoError(t, fleet.Migrate(ctx, fromGorm, fleet.DefaultTable))
	require.NoError(t, fleet.Migrate(ctx, fromGorm, fleet.DefaultTable), "Migrate is idempotent")
	require.NoError(t, fleet.MigrateHistory(ctx, fromGorm, fleet.DefaultHistoryTable))
	require.NoError(t, fleet.MigrateHistory(ctx, fromGorm, fleet.DefaultHistoryTable), "MigrateHistory is idempotent")
	for _, table := range []string{fleet.DefaultTable, fleet.DefaultHistoryTable, fleet.DefaultHistoryTable + fleet.HistoryLeaseSuffix} {
		require.Equal(t, testbed.Shape(t, fromSQL, table), testbed.Shape(t, fromGorm, table), table)
	}
}

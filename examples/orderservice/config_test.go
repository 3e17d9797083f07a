package main

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseConfigFlagsWinOverEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"ORDERSVC_MODE":        "outbox",
		"ORDERSVC_TOPIC":       "from-env",
		"ORDERSVC_NAMESRV":     "10.0.0.1:9876,10.0.0.2:9876",
		"ORDERSVC_ACCESS_KEY":  "AKID-env",
		"ORDERSVC_SECRET_KEY":  "s3cr3t-from-env",
		"ORDERSVC_DSN":         "u:dbpass@tcp(db:3306)/orders?parseTime=true",
		"ORDERSVC_SEED":        "false",
		"ORDERSVC_LOG_LEVEL":   "debug",
		"ORDERSVC_HTTP_ADDR":   ":9000",
		"ORDERSVC_UNRELATED_X": "ignored",
	}
	cfg, err := ParseConfig([]string{"-topic", "from-flag", "-shutdown-timeout", "5s"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, ModeOutbox, cfg.Mode)
	require.Equal(t, "from-flag", cfg.Topic)
	require.Equal(t, []string{"10.0.0.1:9876", "10.0.0.2:9876"}, cfg.NameServers)
	require.Equal(t, "s3cr3t-from-env", cfg.SecretKey)
	require.False(t, cfg.Seed)
	require.Equal(t, slog.LevelDebug, cfg.LogLevel)
	require.Equal(t, 5*time.Second, cfg.ShutdownTimeout)
	require.Equal(t, ":9000", cfg.HTTPAddr)

	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "config", cfg)
	require.NotContains(t, buf.String(), "s3cr3t")
	require.NotContains(t, buf.String(), "dbpass")
	require.NotContains(t, buf.String(), "AKID")
	require.Contains(t, buf.String(), "config.topic=from-flag")
}

func TestParseConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, ModeTransactional, cfg.Mode)
	require.Equal(t, []string{"127.0.0.1:9876"}, cfg.NameServers)
	require.True(t, cfg.Seed)
	require.True(t, cfg.Reconcile, "the example runs the reconciler")
	require.Equal(t, 2*time.Minute, cfg.ReconcileWindow)
}

func TestParseConfigRejects(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"unknown mode":       {"-mode", "eventual"},
		"bad topic":          {"-topic", "no spaces"},
		"half credentials":   {"-access-key", "ak"},
		"bad dsn":            {"-dsn", "not a dsn"},
		"stray argument":     {"serve"},
		"no shutdown budget": {"-shutdown-timeout", "0s"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig(args, func(string) string { return "" }, io.Discard)
			require.Error(t, err)
		})
	}
}

package rmqlog

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBridgeMasksCredentials(t *testing.T) {
	t.Parallel()
	const ak, sk = "AK-rmqlog-test-7f3a", "SK-rmqlog-test-91cc"
	Redact(ak, sk, "")
	var buf bytes.Buffer
	b := &bridge{l: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), min: slog.LevelDebug}

	b.Error("request failed with "+sk, map[string]any{
		"AccessKey": ak,
		"Signature": "c2lnbmF0dXJl",
		"request":   map[string]string{"AccessKey": ak, "topic": "t"},
		"underlay":  errors.New("auth failed for " + ak),
		"broker":    "127.0.0.1:10911",
	})
	b.Info("plain", map[string]any{"n": 3})
	out := buf.String()
	require.NotContains(t, out, ak)
	require.NotContains(t, out, sk)
	require.NotContains(t, out, "c2lnbmF0dXJl")
	require.Contains(t, out, `"broker":"127.0.0.1:10911"`)
	require.Contains(t, out, `"n":3`)
	require.Contains(t, out, "request failed with ****")
}

func TestBridgeDropsBelowMinAndExpectedRollback(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	b := &bridge{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), min: slog.LevelWarn}
	b.Info("routine", nil)
	b.Error(expectedRollbackLog, nil)
	require.Empty(t, buf.String())
	b.Warning("kept", nil)
	require.Contains(t, buf.String(), "component=rocketmq-client")
}

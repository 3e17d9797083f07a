package rmqlog

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/rlog"
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

// TestInstallIsProcessWideAndRefusesAnotherSetting: the first Install
// decides; the same setting again is fine; another logger or level
// changes nothing and says so with ErrConflict. It is the only test of this
// package that calls Install, since the client's logger is process-wide.
func TestInstallIsProcessWideAndRefusesAnotherSetting(t *testing.T) {
	var first, second bytes.Buffer
	l1 := slog.New(slog.NewTextHandler(&first, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l2 := slog.New(slog.NewTextHandler(&second, &slog.HandlerOptions{Level: slog.LevelDebug}))
	require.NoError(t, Install(l1, slog.LevelWarn))
	require.NoError(t, Install(l1, slog.LevelWarn), "the same setting again")

	err := Install(l1, slog.LevelDebug)
	require.ErrorIs(t, err, ErrConflict)
	require.ErrorContains(t, err, "level WARN")
	err = Install(l2, slog.LevelWarn)
	require.ErrorIs(t, err, ErrConflict)
	require.ErrorIs(t, Install(nil, slog.LevelWarn), ErrConflict, "nil is slog.Default(), another logger")

	// The client's logs still go to the first logger, at its level.
	rlog.Info("routine", nil)
	rlog.Warning("route trouble", map[string]any{"topic": "t"})
	require.NotContains(t, first.String(), "routine")
	require.Contains(t, first.String(), "route trouble")
	require.Empty(t, second.String())
}

package txrmq

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
)

// TestClientLogSettingConflictIsWarnedOnce: the client's logger is
// process-wide. A component built after another setting was installed
// warns on its own logger that its Logger and ClientLogLevel do not apply
// to the client's logs, once per setting.
func TestClientLogSettingConflictIsWarnedOnce(t *testing.T) {
	t.Parallel()
	// Every test of this package installs this setting first (testbed does
	// the same), so it is the one in force.
	if err := rmqlog.Install(slog.Default(), DefaultClientLogLevel); err != nil {
		t.Fatalf("the process's client log setting is not the default one: %v", err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	cfg := PublisherConfig{Conn: Conn{NameServers: []string{"127.0.0.1:9876"}, Logger: log, ClientLogLevel: slog.LevelInfo}, Group: "log_conflict"}
	for range 3 {
		p, err := NewPublisher(cfg)
		require.NoError(t, err)
		require.NoError(t, p.Close(t.Context()))
	}
	require.Equal(t, 1, strings.Count(buf.String(), "level=WARN"), buf.String())
	require.Contains(t, buf.String(), "do not apply to rocketmq-client-go's own logs")
	require.Contains(t, buf.String(), "already installed with another setting")

	// Another logger at the default level is another setting too: one
	// more warning, once.
	cfg.ClientLogLevel = nil
	for range 2 {
		p, err := NewPublisher(cfg)
		require.NoError(t, err)
		require.NoError(t, p.Close(t.Context()))
	}
	require.Equal(t, 2, strings.Count(buf.String(), "level=WARN"), buf.String())
}

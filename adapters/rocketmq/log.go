package rocketmq

import (
	"log/slog"

	"github.com/txmsg/txmsg/adapters/rocketmq/rmqlog"
)

// installLogBridge routes the client's process-wide logger to the first
// component's logger; see package rmqlog.
func installLogBridge(l *slog.Logger, min slog.Level) { rmqlog.Install(l, min) }

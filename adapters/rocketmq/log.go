package rocketmq

import (
	"context"
	"log/slog"
	"sync"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// The client logs through one process-wide logger. The bridge sends it to
// the slog.Logger of the first txmsg component that sets it up: a process
// has one client logger whatever it does, and a later component cannot
// take it over without surprising the first.
var bridgeOnce sync.Once

func installLogBridge(l *slog.Logger, min slog.Level) {
	bridgeOnce.Do(func() { rlog.SetLogger(&slogBridge{l: l, min: min}) })
}

// expectedRollbackLog is what the client logs at error level whenever a
// local transaction does not commit. For txmsg that is a normal outcome,
// reported to the caller, so the bridge drops it.
const expectedRollbackLog = "executeLocalTransaction but state unexpected"

type slogBridge struct {
	l   *slog.Logger
	min slog.Level
}

func (b *slogBridge) log(level slog.Level, msg string, fields map[string]any) {
	if level < b.min || !b.l.Enabled(context.Background(), level) {
		return
	}
	if msg == expectedRollbackLog {
		return
	}
	attrs := make([]slog.Attr, 0, len(fields)+1)
	attrs = append(attrs, slog.String("component", "rocketmq-client"))
	for k, v := range fields {
		if k == "AccessKey" || k == "SecretKey" || k == "SecurityToken" {
			v = "****"
		}
		attrs = append(attrs, slog.Any(k, v))
	}
	b.l.LogAttrs(context.Background(), level, msg, attrs...)
}

func (b *slogBridge) Debug(msg string, f map[string]any)   { b.log(slog.LevelDebug, msg, f) }
func (b *slogBridge) Info(msg string, f map[string]any)    { b.log(slog.LevelInfo, msg, f) }
func (b *slogBridge) Warning(msg string, f map[string]any) { b.log(slog.LevelWarn, msg, f) }
func (b *slogBridge) Error(msg string, f map[string]any)   { b.log(slog.LevelError, msg, f) }
func (b *slogBridge) Fatal(msg string, f map[string]any)   { b.log(slog.LevelError+4, msg, f) }

// Level is part of rlog.Logger; the bridge's level comes from the config.
func (b *slogBridge) Level(string) {}

// OutputPath is part of rlog.Logger; output goes wherever the slog.Logger
// writes.
func (b *slogBridge) OutputPath(string) error { return nil }

var _ rlog.Logger = (*slogBridge)(nil)

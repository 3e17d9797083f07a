// Package rmqlog routes rocketmq-client-go's logger to a *slog.Logger.
//
// The client logs through one process-wide logger, read by every client
// goroutine without synchronisation, so it can be replaced safely only
// before the first client starts. txmsg's RocketMQ components call Install
// in their constructors; a program that also creates clients of its own
// (admin tools, plain consumers) should call Install first, before any of
// them.
//
// The bridge never passes credentials on: fields named like AccessKey or
// SecretKey are masked, and every value registered with [Redact] is
// replaced by "****" wherever it appears in a message or a field.
package rmqlog

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// The client's logger is process-wide, so what the bridge knows is too:
// whether it is installed, and which secrets to mask.
var (
	once sync.Once

	secretsMu sync.RWMutex
	secrets   []string
)

// Install sends the client's logs at level min and above to l, and drops
// the rest. Only the first call in a process takes effect; it reports
// whether this call did.
func Install(l *slog.Logger, min slog.Level) bool {
	installed := false
	once.Do(func() {
		if l == nil {
			l = slog.Default()
		}
		rlog.SetLogger(&bridge{l: l, min: min})
		installed = true
	})
	return installed
}

// Redact registers values, such as an access key, a secret key or a
// security token, that the bridge masks in every client log line from now
// on, whichever logger Install was given. Empty values are ignored.
// txmsg's RocketMQ components register their credentials themselves.
func Redact(values ...string) {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	for _, v := range values {
		if v != "" && !contains(secrets, v) {
			secrets = append(secrets, v)
		}
	}
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// scrub replaces every registered secret in s.
func scrub(s string, secrets []string) (string, bool) {
	changed := false
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, "****")
			changed = true
		}
	}
	return s, changed
}

// expectedRollbackLog is what the client logs at error level whenever a
// local transaction does not commit. For txmsg that is a normal outcome,
// reported to the caller, so the bridge drops it.
const expectedRollbackLog = "executeLocalTransaction but state unexpected"

// secretFields are client log fields that may carry credentials.
var secretFields = map[string]bool{
	"AccessKey": true, "SecretKey": true, "SecurityToken": true, "Signature": true,
	"accessKey": true, "secretKey": true, "securityToken": true, "signature": true,
}

type bridge struct {
	l   *slog.Logger
	min slog.Level
}

func (b *bridge) log(level slog.Level, msg string, fields map[string]any) {
	if level < b.min || msg == expectedRollbackLog || !b.l.Enabled(context.Background(), level) {
		return
	}
	secretsMu.RLock()
	masked := secrets
	secretsMu.RUnlock()
	msg, _ = scrub(msg, masked)
	attrs := make([]slog.Attr, 0, len(fields)+1)
	attrs = append(attrs, slog.String("component", "rocketmq-client"))
	for k, v := range fields {
		switch {
		case secretFields[k]:
			v = "****"
		case len(masked) > 0 && v != nil:
			if s, changed := scrub(fmt.Sprint(v), masked); changed {
				v = s
			}
		}
		attrs = append(attrs, slog.Any(k, v))
	}
	b.l.LogAttrs(context.Background(), level, msg, attrs...)
}

func (b *bridge) Debug(msg string, f map[string]any)   { b.log(slog.LevelDebug, msg, f) }
func (b *bridge) Info(msg string, f map[string]any)    { b.log(slog.LevelInfo, msg, f) }
func (b *bridge) Warning(msg string, f map[string]any) { b.log(slog.LevelWarn, msg, f) }
func (b *bridge) Error(msg string, f map[string]any)   { b.log(slog.LevelError, msg, f) }
func (b *bridge) Fatal(msg string, f map[string]any)   { b.log(slog.LevelError+4, msg, f) }

// Level is part of rlog.Logger; the level is fixed by Install.
func (b *bridge) Level(string) {}

// OutputPath is part of rlog.Logger; output goes wherever the slog.Logger
// writes.
func (b *bridge) OutputPath(string) error { return nil }

var _ rlog.Logger = (*bridge)(nil)

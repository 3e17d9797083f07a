// Package rmqlog routes rocketmq-client-go's logger to a *slog.Logger.
//
// What is process-wide: the client logs through one logger per process,
// read by every client goroutine without synchronisation, so it can be set
// safely only once, before the first client starts. Hence the first Install
// in a process decides, for every RocketMQ client of the process, where the
// client's own logs go and from which level; so does the list of secrets
// to mask ([Redact]). txmsg's RocketMQ components call Install in their
// constructors with their Logger and ClientLogLevel. A later Install with a
// different logger or level changes nothing and returns an error wrapping
// [ErrConflict] (the components log it as a warning, once per setting). A
// program that wants one place for the client's logs, or that creates
// clients of its own (admin tools, plain consumers), calls Install first,
// before any of them.
//
// The bridge never passes credentials on: fields named like AccessKey or
// SecretKey are masked, and every value registered with [Redact] is
// replaced by "****" wherever it appears in a message or a field.
package rmqlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// The client's logger is process-wide, so what the bridge knows is too:
// the installed bridge, and which secrets to mask.
var (
	installMu sync.Mutex
	installed *bridge

	secretsMu sync.RWMutex
	secrets   []string
)

// ErrConflict means the client's logger was already installed with
// another logger or level; the first setting stays in force.
var ErrConflict = errors.New("rmqlog: rocketmq-client-go's logger is process-wide and already installed with another setting")

// Install sends the client's logs at level min and above to l (nil means
// slog.Default()), and drops the rest. The first call in a process takes
// effect. A later call with the same logger and level returns nil; with
// another one it changes nothing and returns an error wrapping
// [ErrConflict] that names both levels.
func Install(l *slog.Logger, min slog.Level) error {
	if l == nil {
		l = slog.Default()
	}
	installMu.Lock()
	defer installMu.Unlock()
	switch {
	case installed == nil:
		installed = &bridge{l: l, min: min}
		rlog.SetLogger(installed)
		return nil
	case installed.l == l && installed.min == min:
		return nil
	case installed.l == l:
		return fmt.Errorf("%w: client logs stay at level %s and above, not %s", ErrConflict, installed.min, min)
	default:
		return fmt.Errorf("%w: client logs (level %s and above) stay with the first logger installed, not this one (level %s)", ErrConflict, installed.min, min)
	}
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

// CloseBarrier is a value txrmq sends on a transaction producer's
// check-back channel when it closes: the client's reader takes it only
// after it has finished the END_TRANSACTION of the check-back before, so
// the shutdown that follows cannot race that send. The client logs the
// unknown value at error level; the bridge drops that line.
type CloseBarrier struct{}

// String is what the client's log line shows.
func (CloseBarrier) String() string { return "txmsg close barrier" }

// closeBarrierLog is the client's log line for a CloseBarrier.
var closeBarrierLog = fmt.Sprintf("unknown type %v", CloseBarrier{})

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
	if level < b.min || msg == expectedRollbackLog || msg == closeBarrierLog || !b.l.Enabled(context.Background(), level) {
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

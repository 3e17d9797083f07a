package txrmq

import (
	"errors"
	"log/slog"
	"sync"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
	"github.com/txmsg/txmsg/txmsg"
)

// withErr appends err to a log record's attributes as "err" and, when err
// is or wraps a *txmsg.PanicError (a handler or codec panicked), the
// panicking goroutine's stack as "stack".
func withErr(attrs []any, err error) []any {
	attrs = append(attrs, "err", err)
	var pe *txmsg.PanicError
	if errors.As(err, &pe) && len(pe.Stack) > 0 {
		attrs = append(attrs, "stack", string(pe.Stack))
	}
	return attrs
}

// conflictsWarned holds the (logger, level) settings whose conflict with
// the installed client log bridge was already logged: each is logged once
// per process, like the bridge itself.
var (
	conflictsMu     sync.Mutex
	conflictsWarned = map[bridgeSetting]bool{}
)

type bridgeSetting struct {
	l     *slog.Logger
	level slog.Level
}

// installLogBridge routes the client's process-wide logger to l at level
// min (see package rmqlog). When an earlier component or the program
// installed another setting, that one stays, and l gets a warning saying
// so, once per setting.
func installLogBridge(l *slog.Logger, min slog.Leveler) {
	level := DefaultClientLogLevel
	if min != nil {
		level = min.Level()
	}
	err := rmqlog.Install(l, level)
	if !errors.Is(err, rmqlog.ErrConflict) {
		return
	}
	key := bridgeSetting{l, level}
	conflictsMu.Lock()
	warned := conflictsWarned[key]
	conflictsWarned[key] = true
	conflictsMu.Unlock()
	if !warned {
		l.Warn("Logger and ClientLogLevel do not apply to rocketmq-client-go's own logs: they go where the process's first RocketMQ component (or rmqlog.Install) sent them", "err", err)
	}
}

// redactCredentials makes the client log bridge mask c's credentials, in
// whatever it logs from now on.
func (c *Conn) redactCredentials() { rmqlog.Redact(c.AccessKey, c.SecretKey, c.SecurityToken) }

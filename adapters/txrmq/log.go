package txrmq

import (
	"log/slog"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
)

// installLogBridge routes the client's process-wide logger to the first
// component's logger; see package rmqlog.
func installLogBridge(l *slog.Logger, min slog.Level) { rmqlog.Install(l, min) }

// redactCredentials makes the client log bridge mask c's credentials, in
// whatever it logs from now on.
func (c *Config) redactCredentials() { rmqlog.Redact(c.AccessKey, c.SecretKey, c.SecurityToken) }

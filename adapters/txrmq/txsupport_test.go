package txrmq

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// order is the business row of the transactional tests.
type order struct {
	ID    int64  `gorm:"primaryKey;autoIncrement"`
	MsgID string `gorm:"size:64;uniqueIndex"`
	SKU   string `gorm:"size:64"`
}

// txEnv is one test's database, checker, topic and group.
type txEnv struct {
	db    *gorm.DB
	dsn   string
	chk   *checker.Checker
	topic string
	group string
}

func newTxEnv(t *testing.T) *txEnv {
	t.Helper()
	testbed.RequireBroker(t)
	db, dsn := testbed.DBWithDSN(t)
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(context.Background()))
	require.NoError(t, db.AutoMigrate(&order{}))
	return &txEnv{db: db, dsn: dsn, chk: chk, topic: testbed.Topic(t), group: testbed.Name(t, "txp")}
}

func (e *txEnv) config(logger *slog.Logger) TransactionalConfig {
	return TransactionalConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: logger}, Group: e.group,
		Topics: []string{e.topic},
	}
}

// start builds and starts a transactional producer of the env's group,
// closed when t ends.
func (e *txEnv) start(t *testing.T, db *gorm.DB, chk *checker.Checker, logger *slog.Logger, hooks ...txmsg.Hook) *Transactional {
	t.Helper()
	cfg := e.config(logger)
	cfg.Hooks = hooks
	tr, err := NewTransactional(db, chk, cfg)
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}

// cuttableChecker returns a checker on the env's database reached through a
// proxy the test can cut.
func (e *txEnv) cuttableChecker(t *testing.T) (*testbed.Proxy, *checker.Checker) {
	t.Helper()
	proxy, db := testbed.ProxiedDB(t, e.dsn)
	chk, err := checker.New(db, checker.Config{ResolveTimeout: time.Second})
	require.NoError(t, err)
	return proxy, chk
}

func (e *txEnv) orders(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, e.db.Model(&order{}).Count(&n).Error)
	return n
}

func (e *txEnv) barrier(t *testing.T, id string) string {
	t.Helper()
	s, err := e.chk.Lookup(context.Background(), id)
	require.NoError(t, err)
	return s
}

// logRecorder is a slog handler that keeps records, for asserting what a
// component logged.
type logRecorder struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
	h   slog.Handler
}

func newLogRecorder() (*slog.Logger, *logRecorder) {
	r := &logRecorder{mu: &sync.Mutex{}, buf: &bytes.Buffer{}}
	r.h = slog.NewTextHandler(lockedWriter{r}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(r.h), r
}

type lockedWriter struct{ r *logRecorder }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.buf.Write(p)
}

// countLines counts logged lines containing every part.
func (r *logRecorder) countLines(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, line := range strings.Split(r.buf.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all && line != "" {
			n++
		}
	}
	return n
}

func (r *logRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// pointHook runs functions at two points of a transactional send: after the
// half message was stored (before the local transaction) and after the
// local transaction ended (before END_TRANSACTION).
type pointHook struct {
	afterHalfSend func(msg *txmsg.Message)
	afterLocal    func(msg *txmsg.Message, state txmsg.LocalState)
}

func (h pointHook) OnHalfSent(_ context.Context, msg *txmsg.Message, err error, _ time.Duration) {
	if err == nil && h.afterHalfSend != nil {
		h.afterHalfSend(msg)
	}
}

func (h pointHook) OnLocalDone(_ context.Context, msg *txmsg.Message, state txmsg.LocalState, _ error, _ time.Duration) {
	if h.afterLocal != nil {
		h.afterLocal(msg, state)
	}
}

var (
	_ txmsg.HookHalfSent  = pointHook{}
	_ txmsg.HookLocalDone = pointHook{}
)

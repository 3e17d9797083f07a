package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// testLogger writes warnings and errors to the test's output, shown when a
// test fails or runs with -v.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// env is one test's database, outbox and topic name.
type env struct {
	t     *testing.T
	db    *gorm.DB
	dsn   string
	ob    *Outbox
	topic string
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	return newEnvOn(t, cfg)
}

// newEnvOn is newEnv on a database made with opts.
func newEnvOn(t *testing.T, cfg Config, opts ...testbed.DBOption) *env {
	t.Helper()
	db, dsn := testbed.DBWithDSN(t, opts...)
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	ob, err := New(db, cfg)
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(context.Background()))
	require.NoError(t, db.Exec("CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, n INT NOT NULL)").Error)
	return &env{t: t, db: db, dsn: dsn, ob: ob, topic: "outbox_test_topic"}
}

func (e *env) msg(body string, opts ...func(*txmsg.Message)) *txmsg.Message {
	m := &txmsg.Message{Topic: e.topic, Body: []byte(body)}
	for _, o := range opts {
		o(m)
	}
	return m
}

func withKey(k string) func(*txmsg.Message) { return func(m *txmsg.Message) { m.ShardingKey = k } }

// createOrder is a LocalTx that writes a business row.
func createOrder(id string) txmsg.LocalTx {
	return func(ctx context.Context, tx *gorm.DB) error {
		return tx.Exec("INSERT INTO orders (id, n) VALUES (?, 1)", id).Error
	}
}

// send commits n messages through Transact with bodies prefix-0 … and
// returns their IDs in commit order.
func (e *env) send(n int, prefix string, opts ...func(*txmsg.Message)) []string {
	e.t.Helper()
	ids := make([]string, n)
	for i := range n {
		m := e.msg(fmt.Sprintf("%s-%d", prefix, i), opts...)
		r, err := e.ob.Transact(context.Background(), m, createOrder(fmt.Sprintf("%s-%d", prefix, i)))
		require.NoError(e.t, err)
		ids[i] = r.ID
	}
	return ids
}

// enqueue bulk-inserts n messages in transactions of up to 1000.
func (e *env) enqueue(n int, mk func(i int) *txmsg.Message) {
	e.t.Helper()
	for start := 0; start < n; start += 1000 {
		end := min(start+1000, n)
		msgs := make([]*txmsg.Message, 0, end-start)
		for i := start; i < end; i++ {
			msgs = append(msgs, mk(i))
		}
		require.NoError(e.t, e.db.Transaction(func(tx *gorm.DB) error {
			return e.ob.EnqueueTx(context.Background(), tx, msgs...)
		}))
	}
	e.ob.Notify()
}

func (e *env) rows(where string, args ...any) []Row {
	e.t.Helper()
	var rows []Row
	q := e.db.Table(e.ob.Table()).Order("id")
	if where != "" {
		q = q.Where(where, args...)
	}
	require.NoError(e.t, q.Find(&rows).Error)
	return rows
}

func (e *env) count(table string) int64 {
	e.t.Helper()
	var n int64
	require.NoError(e.t, e.db.Table(table).Count(&n).Error)
	return n
}

func (e *env) stats() Stats {
	e.t.Helper()
	s, err := e.ob.Stats(context.Background())
	require.NoError(e.t, err)
	return s
}

// relay builds a relay on e's outbox with fast test timings, unless cfg
// sets its own.
func (e *env) relay(pub txmsg.Publisher, cfg RelayConfig) *Relay {
	e.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(e.t)
	}
	setDefault(&cfg.PollInterval, 100*time.Millisecond)
	setDefault(&cfg.MinBackoff, 20*time.Millisecond)
	setDefault(&cfg.MaxBackoff, 100*time.Millisecond)
	r, err := NewRelay(e.ob, pub, cfg)
	require.NoError(e.t, err)
	return r
}

// running is a Relay.Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// start runs r until the test ends or stop is called.
func start(t *testing.T, r *Relay) *running {
	ctx, cancel := context.WithCancel(context.Background())
	rr := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		rr.err = r.Run(ctx)
		close(rr.done)
	}()
	t.Cleanup(func() { rr.stop(t) })
	return rr
}

// stop cancels Run and waits for it to return.
func (rr *running) stop(t *testing.T) error {
	rr.cancel()
	select {
	case <-rr.done:
		return rr.err
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop within 30 s")
		return nil
	}
}

// exited reports whether Run has returned.
func (rr *running) exited() bool {
	select {
	case <-rr.done:
		return true
	default:
		return false
	}
}

// memPublisher records what it publishes, in order. fail, when set,
// decides per message whether the publish fails.
type memPublisher struct {
	mu    sync.Mutex
	order []*txmsg.Message
	byID  map[string]int
	calls int
	fail  func(m *txmsg.Message) error
}

func newMemPublisher() *memPublisher { return &memPublisher{byID: map[string]int{}} }

func (p *memPublisher) setFail(f func(m *txmsg.Message) error) {
	p.mu.Lock()
	p.fail = f
	p.mu.Unlock()
}

func (p *memPublisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	errs := make([]error, len(msgs))
	failed := 0
	for i, m := range msgs {
		if p.fail != nil {
			if err := p.fail(m); err != nil {
				errs[i] = err
				failed++
				continue
			}
		}
		p.order = append(p.order, m.Clone())
		p.byID[m.ID]++
	}
	switch {
	case failed == 0:
		return nil
	case failed == len(msgs):
		return fmt.Errorf("mem: publish: %w", errs[0])
	default:
		return &txmsg.BatchError{Errs: errs}
	}
}

// distinct returns how many different IDs were published.
func (p *memPublisher) distinct() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byID)
}

func (p *memPublisher) times(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byID[id]
}

// duplicates returns the IDs published more than once.
func (p *memPublisher) duplicates() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id, n := range p.byID {
		if n > 1 {
			out = append(out, id)
		}
	}
	return out
}

func (p *memPublisher) published() []*txmsg.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*txmsg.Message(nil), p.order...)
}

var _ txmsg.Publisher = (*memPublisher)(nil)

const (
	waitFor = 20 * time.Second
	tick    = 20 * time.Millisecond
)

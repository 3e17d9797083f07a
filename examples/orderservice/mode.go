package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
)

// Mode is the machinery that gets committed events to the broker; it is
// what differs between the two delivery modes, next to the Transactor.
type Mode interface {
	// Name is ModeTransactional or ModeOutbox.
	Name() string
	// Migrate creates the mode's tables.
	Migrate(ctx context.Context) error
	// Start starts the mode's producers and background work.
	Start(ctx context.Context) error
	// Close stops them; sends under way finish first, or ctx ends.
	Close(ctx context.Context) error
	// Health reports whether the mode can get events to the broker now:
	// the transactional producer's database and topic route, or the
	// relay's database and lag.
	Health(ctx context.Context) error
	// Gauges returns the mode's gauges for /metrics: the outbox's depth
	// in local-table mode, nothing in transactional mode.
	Gauges(ctx context.Context) ([]gauge, error)
}

// transactionalMode sends half messages and answers the broker's
// check-backs from the barrier table. Its sweeper publishes, through a
// plain publisher, the committed transactions the broker gave up on
// because the database could not answer during the whole check window.
type transactionalMode struct {
	chk     *checker.Checker
	tr      *txrmq.Transactional
	sweeper *txrmq.Sweeper
	pub     *txrmq.Publisher
}

func newTransactionalMode(chk *checker.Checker, tr *txrmq.Transactional, sweeper *txrmq.Sweeper, pub *txrmq.Publisher) Mode {
	return &transactionalMode{chk: chk, tr: tr, sweeper: sweeper, pub: pub}
}

func (m *transactionalMode) Name() string                      { return ModeTransactional }
func (m *transactionalMode) Migrate(ctx context.Context) error { return m.chk.Migrate(ctx) }

func (m *transactionalMode) Health(ctx context.Context) error { return m.tr.Health(ctx) }

func (m *transactionalMode) Gauges(context.Context) ([]gauge, error) { return nil, nil }

func (m *transactionalMode) Start(ctx context.Context) error {
	if err := m.tr.Start(ctx); err != nil {
		return err
	}
	if err := m.pub.Start(ctx); err != nil {
		return err
	}
	return m.sweeper.Start(ctx)
}

func (m *transactionalMode) Close(ctx context.Context) error {
	return errors.Join(m.tr.Close(ctx), m.sweeper.Close(ctx), m.pub.Close(ctx))
}

// outboxMode writes events to the outbox table; its relay publishes them.
type outboxMode struct {
	ob    *outbox.Outbox
	relay *outbox.Relay
	pub   *txrmq.Publisher
	log   *slog.Logger

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

func newOutboxMode(ob *outbox.Outbox, relay *outbox.Relay, pub *txrmq.Publisher, log *slog.Logger) Mode {
	return &outboxMode{ob: ob, relay: relay, pub: pub, log: log}
}

func (m *outboxMode) Name() string                      { return ModeOutbox }
func (m *outboxMode) Migrate(ctx context.Context) error { return m.ob.Migrate(ctx) }

func (m *outboxMode) Health(ctx context.Context) error { return m.relay.Health(ctx) }

// Gauges reads the outbox's depth now, as adapters/txprom's
// OutboxCollector would.
func (m *outboxMode) Gauges(ctx context.Context) ([]gauge, error) {
	s, err := m.ob.Stats(ctx)
	if err != nil {
		return nil, err
	}
	t := m.ob.Table()
	const rowsHelp = "Outbox rows by status (pending, sent, dead)."
	return []gauge{
		{name: "txmsg_outbox_rows", help: rowsHelp, labels: []string{"table", t, "status", "pending"}, value: float64(s.Pending)},
		{name: "txmsg_outbox_rows", help: rowsHelp, labels: []string{"table", t, "status", "sent"}, value: float64(s.Sent)},
		{name: "txmsg_outbox_rows", help: rowsHelp, labels: []string{"table", t, "status", "dead"}, value: float64(s.Dead)},
		{name: "txmsg_outbox_oldest_pending_age_seconds", help: "Age of the oldest pending outbox row in seconds; 0 when none is pending.",
			labels: []string{"table", t}, value: s.OldestPending.Seconds()},
	}, nil
}

// Start runs the relay until Close. Its context is not ctx: the relay
// lives as long as the service, not as long as startup.
func (m *outboxMode) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		return errors.New("outbox relay already started")
	}
	if err := m.pub.Start(ctx); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m.stop, m.done = stop, make(chan struct{})
	go func() {
		defer close(m.done)
		if err := m.relay.Run(runCtx); err != nil {
			m.log.Error("outbox relay stopped", "err", err)
		}
	}()
	return nil
}

// Close stops the relay (a batch being published is finished and marked)
// and then the publisher. Rows still pending are published after the next
// start.
func (m *outboxMode) Close(ctx context.Context) error {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.mu.Unlock()
	var err error
	if stop != nil {
		stop()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("outbox relay still running: %w", ctx.Err())
		}
	}
	return errors.Join(err, m.pub.Close(ctx))
}

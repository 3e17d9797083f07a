package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
)

// Settings of the components under test that differ from the defaults,
// and why.
const (
	// relayPoll: the relays run in their own processes, so the outbox's
	// in-process nudge never reaches them; they find new rows by polling.
	relayPoll = 200 * time.Millisecond
	// relayLeaseTTL: a killed relay's buckets pass to the other relay (or
	// its own next incarnation) after this.
	relayLeaseTTL = 3 * time.Second
	// relayMaxBackoff bounds how long a row waits after the broker failed.
	relayMaxBackoff = 5 * time.Second
	// relayMaxAttempts is small so that the broker-long-outage fault
	// outlasts MaxAttempts × MaxBackoff in seconds: only rows the broker
	// refuses may count attempts, and a broker that is away refuses none.
	relayMaxAttempts = 3
	// consumerRetryLevel and consumerMaxRetries: every redelivery after a
	// handler error waits 5 s (broker delay level 2) instead of 10 s,
	// 30 s, 1 min, ...; 3 redeliveries span 15 s, shorter than the
	// db-long-outage fault: failures while the database is down must not
	// count, or its messages would go to %DLQ% and be lost to the run.
	consumerRetryLevel = 2
	consumerMaxRetries = 3
	// orderedMinBackoff, orderedMaxBackoff and orderedMaxRetries: an
	// ordered queue whose handler fails retries in place after 0.5 s,
	// doubling up to 5 s; 5 retries span 12.5 s, again shorter than the
	// db-long-outage fault, so an outage that counted would park messages.
	orderedMinBackoff = 500 * time.Millisecond
	orderedMaxBackoff = 5 * time.Second
	orderedMaxRetries = 5
	// consumerLevelDelay is the broker's delay of consumerRetryLevel.
	consumerLevelDelay = 5 * time.Second
)

// consumerRetryBudget is how long the concurrent consumer's redeliveries
// of a failing message span before the broker moves it to %DLQ%.
func consumerRetryBudget() time.Duration { return consumerMaxRetries * consumerLevelDelay }

// orderedRetryBudget is how long the ordered consumer retries a failing
// message in place before it parks it.
func orderedRetryBudget() time.Duration {
	var d time.Duration
	for i, b := 0, orderedMinBackoff; i < orderedMaxRetries; i, b = i+1, min(2*b, orderedMaxBackoff) {
		d += b
	}
	return d
}

// Relay naming schemes (config.RelayNames).
const (
	relayNamesUnique = "unique"
	relayNamesStable = "stable"
)

// relayHooks kills the relay after a batch was published and before it is
// marked sent: the rows are published again by the next claim.
type relayHooks struct{ ks *killSwitch }

func (h relayHooks) OnRelayBatch(_ context.Context, _, _ string, size, failed int, _ time.Duration) {
	if failed < size {
		h.ks.at(0, "relay-after-publish", fmt.Sprintf("%d-of-%d", size-failed, size))
	}
}

var _ txmsg.HookRelayBatch = relayHooks{}

// runRelay runs the background part of a local-table stack: a publisher
// and one ordered relay.
func runRelay(ctx context.Context, spec childSpec, ks *killSwitch, log *slog.Logger) error {
	db, err := openDB(spec.DSN, 8)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	topic := spec.Topics[modeOutbox]
	name := fmt.Sprintf("%s-%d", spec.Name, os.Getpid())
	if spec.StableName {
		name = spec.Name
	}
	st, err := stack.Outbox(db, stack.OutboxConfig{
		Config: stack.Config{
			RocketMQ: txrmq.Conn{NameServers: []string{spec.NameServer}}, Group: spec.RelayGroup,
			Topics:    []string{topic},
			Parts:     stack.PartBackground,
			Logger:    log,
			Hooks:     txmsg.Hooks{relayHooks{ks}},
			Reconcile: spec.Reconcile,
		},
		Relay: outbox.RelayConfig{
			Name:         name,
			Ordered:      true,
			PollInterval: relayPoll,
			LeaseTTL:     relayLeaseTTL,
			MinBackoff:   500 * time.Millisecond,
			MaxBackoff:   relayMaxBackoff,
			MaxAttempts:  relayMaxAttempts,
		},
	})
	if err != nil {
		return err
	}
	return runUntilDone(ctx, st)
}

// runUntilDone starts st, reports ready, and closes st once ctx ends: a
// batch being published is finished and marked first.
func runUntilDone(ctx context.Context, st *stack.Stack) error {
	if err := st.Start(ctx); err != nil {
		return err
	}
	ready()
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return st.Close(cctx)
}

// Kill points of the consumer.
const (
	pointMidHandler  = 0 // effect written, transaction open
	pointAfterCommit = 1 // transaction committed, broker not acknowledged
)

// consumerHooks kills the consumer after the handler's transaction
// committed and before the broker is acknowledged: the message comes again
// and the inbox must drop it.
type consumerHooks struct{ ks *killSwitch }

func (h consumerHooks) OnConsumed(_ context.Context, _ string, r *txmsg.Received, outcome txmsg.Outcome, err error, _ time.Duration) {
	if err == nil && outcome == txmsg.OutcomeHandled {
		h.ks.at(pointAfterCommit, "after-commit-before-ack", r.Message.ID)
	}
}

var _ txmsg.HookConsumed = consumerHooks{}

func runConsumer(ctx context.Context, spec childSpec, ks *killSwitch, log *slog.Logger) error {
	db, err := openDB(spec.DSN, 20)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Logger: log, Hooks: txmsg.Hooks{consumerHooks{ks}}})
	if err != nil {
		return err
	}
	pid := os.Getpid()
	handler := func(mode string) txmsg.Handler[orderEvent] {
		return func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[orderEvent]) error {
			e := effectRow{
				MsgID: d.Message.ID, Mode: mode, ShardKey: d.Event.Key, Seq: d.Event.Seq,
				OrderCreatedAt: time.UnixMicro(d.Event.CreatedAt).UTC(), HandledAt: time.Now().UTC(),
				ReceivedAt: d.ReceivedAt.UTC(), Attempt: d.Attempt, Pid: pid,
			}
			if !d.DueAt.IsZero() {
				due := d.DueAt.UTC()
				e.DueAt = &due
			}
			if err := tx.Table(effectsTable).Create(&e).Error; err != nil {
				return err
			}
			ks.at(pointMidHandler, "mid-handler", d.Message.ID)
			return nil
		}
	}
	// The tx topic goes to a concurrent consumer, the ordered outbox
	// topic to an ordered one (its own group: a group is consumed one way
	// or the other), whose handling order I5 checks.
	c, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[orderEvent]{Name: spec.Topics[modeTx]}, handler(modeTx))}, txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{spec.NameServer}, Logger: log}, Group: spec.ConsumerGroup,
		Concurrency:       8,
		RetryDelayLevel:   consumerRetryLevel,
		MaxReconsumeTimes: consumerMaxRetries,
	})
	if err != nil {
		return err
	}
	oc, err := txrmq.NewOrderedConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[orderEvent]{Name: spec.Topics[modeOutbox]}, handler(modeOutbox))}, txrmq.OrderedConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{spec.NameServer}, Logger: log}, Group: spec.OrderedGroup,
		MinBackoff:        orderedMinBackoff,
		MaxBackoff:        orderedMaxBackoff,
		MaxReconsumeTimes: orderedMaxRetries,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	if err := oc.Start(ctx); err != nil {
		return err
	}
	ready()
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return errors.Join(oc.Close(cctx), c.Close(cctx))
}

// runSweeper runs the background part of a transactional stack: the
// sweeper, in the group the stack derives from the producer group, and its
// publisher, and the forwarder of delayed events.
func runSweeper(ctx context.Context, spec childSpec, log *slog.Logger) error {
	db, err := openDB(spec.DSN, 8)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	st, err := stack.Transactional(db, stack.TransactionalConfig{
		Config: stack.Config{
			RocketMQ: txrmq.Conn{NameServers: []string{spec.NameServer}}, Group: spec.TxGroup,
			Topics:    []string{spec.Topics[modeTx]},
			Parts:     stack.PartBackground,
			Logger:    log,
			Reconcile: spec.Reconcile,
		},
		Sweeper:  txrmq.SweeperConfig{HoldFor: 20 * time.Second, RetryDelayLevel: consumerRetryLevel},
		Producer: txrmq.TransactionalConfig{DelayTopic: spec.DelayTopic},
	})
	if err != nil {
		return err
	}
	return runUntilDone(ctx, st)
}

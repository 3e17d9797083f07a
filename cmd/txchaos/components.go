package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
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
	// consumerRetryLevel: every redelivery after a handler error waits
	// 5 s (broker delay level 2) instead of 10 s, 30 s, 1 min, ...; 16
	// retries then span 80 s, longer than any single outage here.
	consumerRetryLevel = 2
)

// Relay naming schemes (config.RelayNames).
const (
	relayNamesUnique = "unique"
	relayNamesStable = "stable"
)

// relayHooks kills the relay after a batch was published and before it is
// marked sent: the rows are published again by the next claim.
type relayHooks struct{ ks *killSwitch }

func (h relayHooks) OnRelayBatch(_ context.Context, size, failed int, _ time.Duration) {
	if failed < size {
		h.ks.at(0, "relay-after-publish", fmt.Sprintf("%d-of-%d", size-failed, size))
	}
}

var _ txmsg.HookRelayBatch = relayHooks{}

func runRelay(ctx context.Context, spec childSpec, ks *killSwitch, log *slog.Logger) error {
	db, err := openDB(spec.DSN, 8)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	topic := spec.Topics[modeOutbox]
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{
		Config: txrmq.Config{NameServers: []string{spec.NameServer}, Group: spec.RelayGroup, Logger: log},
		Topics: []string{topic},
	})
	if err != nil {
		return err
	}
	if err := pub.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = pub.Close(context.Background()) }()
	name := fmt.Sprintf("%s-%d", spec.Name, os.Getpid())
	if spec.StableName {
		name = spec.Name
	}
	relay, err := outbox.NewRelay(db, pub, outbox.RelayConfig{
		Name:         name,
		Ordered:      true,
		PollInterval: relayPoll,
		LeaseTTL:     relayLeaseTTL,
		MinBackoff:   500 * time.Millisecond,
		MaxBackoff:   relayMaxBackoff,
		MaxAttempts:  relayMaxAttempts,
		Logger:       log,
		Hooks:        txmsg.Hooks{relayHooks{ks}},
	})
	if err != nil {
		return err
	}
	ready()
	return relay.Run(ctx)
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
				Attempt: d.Attempt, Pid: pid,
			}
			if err := tx.Table(effectsTable).Create(&e).Error; err != nil {
				return err
			}
			ks.at(pointMidHandler, "mid-handler", d.Message.ID)
			return nil
		}
	}
	var routes []txmsg.Route
	for _, mode := range modes {
		routes = append(routes, txmsg.Handle(txmsg.Topic[orderEvent]{Name: spec.Topics[mode]}, handler(mode)))
	}
	c, err := txrmq.NewConsumer(txrmq.ConsumerConfig{
		Config:          txrmq.Config{NameServers: []string{spec.NameServer}, Group: spec.ConsumerGroup, Logger: log},
		Concurrency:     8,
		RetryDelayLevel: consumerRetryLevel,
	}, inbox, routes...)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	ready()
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Close(cctx)
}

func runSweeper(ctx context.Context, spec childSpec, log *slog.Logger) error {
	db, err := openDB(spec.DSN, 8)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	chk, err := checker.New(db, checker.Config{Logger: log})
	if err != nil {
		return err
	}
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{
		Config: txrmq.Config{NameServers: []string{spec.NameServer}, Group: spec.SweeperPubGroup, Logger: log},
		Topics: []string{spec.Topics[modeTx]},
	})
	if err != nil {
		return err
	}
	if err := pub.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = pub.Close(context.Background()) }()
	sw, err := txrmq.NewSweeper(txrmq.SweeperConfig{
		Config:          txrmq.Config{NameServers: []string{spec.NameServer}, Group: spec.SweeperGroup, Logger: log},
		ProducerGroups:  []string{spec.TxGroup},
		HoldFor:         20 * time.Second,
		RetryDelayLevel: consumerRetryLevel,
	}, chk, pub)
	if err != nil {
		return err
	}
	if err := sw.Start(ctx); err != nil {
		return err
	}
	ready()
	<-ctx.Done()
	return sw.Close(context.Background())
}

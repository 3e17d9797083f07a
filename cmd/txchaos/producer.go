package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
)

// errBusiness is the business failure a share of the transactions ends
// with after writing their order row: the row must roll back and no event
// may be handled (I2).
var errBusiness = errors.New("chaos: out of stock")

// Kill points of a producer: SIGUSR1 arms the first, SIGUSR2 the second.
const (
	pointAfterHalfSend    = 0 // transactional mode: half message stored, local transaction not begun
	pointAfterLocalCommit = 1 // local transaction committed, broker (tx) or relay (outbox) not told
)

// producerHooks kills the process at the armed point and reports every
// check-back answer on stderr.
type producerHooks struct{ ks *killSwitch }

func (h producerHooks) OnHalfSent(_ context.Context, msg *txmsg.Message, err error, _ time.Duration) {
	if err == nil {
		h.ks.at(pointAfterHalfSend, "after-half-send", msg.ID)
	}
}

func (h producerHooks) OnLocalDone(_ context.Context, msg *txmsg.Message, state txmsg.LocalState, _ error, _ time.Duration) {
	if state == txmsg.StateCommitted {
		h.ks.at(pointAfterLocalCommit, "after-local-commit", msg.ID)
	}
}

func (h producerHooks) OnCheckBack(_ string, txID, _ string, state txmsg.LocalState, _ error, _ time.Duration) {
	fmt.Fprintln(os.Stderr, lineCheckBack, state.String(), txID)
}

var (
	_ txmsg.HookHalfSent  = producerHooks{}
	_ txmsg.HookLocalDone = producerHooks{}
	_ txmsg.HookCheckBack = producerHooks{}
)

// runProducer runs spec.Workers workers that each attempt transactions at
// a shared rate until ctx ends, then lets the transactions under way
// finish.
func runProducer(ctx context.Context, spec childSpec, ks *killSwitch, log *slog.Logger) error {
	db, err := openDB(spec.DSN, spec.Workers+4)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	// The producer part of the mode's stack; the relay and the sweeper
	// run in processes of their own.
	topic := spec.Topics[spec.Mode]
	sc := stack.Config{
		RocketMQ: txrmq.Conn{NameServers: []string{spec.NameServer}}, Group: spec.TxGroup,
		Topics:    []string{topic},
		Parts:     stack.PartProducer,
		Logger:    log,
		Hooks:     txmsg.Hooks{producerHooks{ks}},
		Reconcile: spec.Reconcile,
	}
	var st *stack.Stack
	switch spec.Mode {
	case modeTx:
		st, err = stack.Transactional(db, stack.TransactionalConfig{Config: sc, Producer: txrmq.TransactionalConfig{DelayTopic: spec.DelayTopic}})
	case modeOutbox:
		st, err = stack.Outbox(db, stack.OutboxConfig{Config: sc})
	default:
		err = fmt.Errorf("unknown mode %q", spec.Mode)
	}
	if err != nil {
		return err
	}
	if err := st.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = st.Close(context.Background()) }()
	var tr txmsg.Transactor = st
	orders, err := txmsg.NewProducer(tr, txmsg.Topic[orderEvent]{Name: topic, Tag: "created"})
	if err != nil {
		return err
	}
	alog, err := openAttemptLog(spec.AttemptDir, spec.Name, spec.Incarnation)
	if err != nil {
		return err
	}
	defer alog.close()

	tick := time.NewTicker(time.Duration(float64(time.Second) / spec.Rate))
	defer tick.Stop()
	ready()
	var wg sync.WaitGroup
	for w := range spec.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := &worker{spec: spec, orders: orders, alog: alog, log: log}
			for k := range spec.Keys {
				// Keys are new for every incarnation, so each key's
				// sequence is written by one worker, one transaction at a
				// time: its commit order.
				wk.keys = append(wk.keys, fmt.Sprintf("%s%d-%d-%d", spec.Mode[:1], spec.Incarnation, w, k))
			}
			wk.seq = make(map[string]int, len(wk.keys))
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				wk.attempt(ctx)
			}
		}()
	}
	wg.Wait()
	return nil
}

type worker struct {
	spec   childSpec
	orders *txmsg.Producer[orderEvent]
	alog   *attemptLog
	log    *slog.Logger
	keys   []string
	seq    map[string]int
}

// attempt records one transaction, runs it and records its outcome as the
// producer sees it.
func (w *worker) attempt(ctx context.Context) {
	key := w.keys[rand.IntN(len(w.keys))]
	w.seq[key]++
	now := time.Now().UTC()
	evt := orderEvent{Mode: w.spec.Mode, Key: key, Seq: w.seq[key], Qty: 1 + rand.IntN(5), CreatedAt: now.UnixMicro()}
	id := txmsg.NewID()
	fail := rand.Float64() < w.spec.RollbackRatio
	opts := []txmsg.SendOption{txmsg.WithID(id), txmsg.WithShardingKey(key), txmsg.WithKeys(key)}
	if rand.Float64() < w.spec.DelayRatio {
		opts = append(opts, txmsg.WithDelay(500*time.Millisecond+rand.N(2500*time.Millisecond)))
	}
	err := w.alog.write(attemptRecord{Ev: evTry, ID: id, Mode: w.spec.Mode, Key: key, Seq: evt.Seq, Rollback: fail, T: now.UnixMicro()})
	if err != nil {
		w.log.Error("cannot record the attempt; not attempting", "err", err)
		return
	}
	// A SIGTERM lets the transaction under way finish.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	receipt, err := w.orders.Send(tctx, evt, func(ctx context.Context, tx *gorm.DB) error {
		row := orderRow{ID: id, Mode: w.spec.Mode, ShardKey: key, Seq: evt.Seq, Qty: evt.Qty, CreatedAt: now}
		if err := tx.Table(ordersTable).Create(&row).Error; err != nil {
			return err
		}
		if fail {
			return errBusiness
		}
		return nil
	}, opts...)
	rec := attemptRecord{Ev: evEnd, ID: id, Outcome: outcomeOf(receipt, err), T: time.Now().UTC().UnixMicro()}
	if err != nil {
		rec.Err = err.Error()
	}
	if werr := w.alog.write(rec); werr != nil {
		w.log.Error("cannot record the outcome", "txmsg_id", id, "err", werr)
	}
}

// outcomeOf is the producer-side outcome of a Transact.
func outcomeOf(receipt *txmsg.Receipt, err error) string {
	switch {
	case err == nil:
		return outcomeCommitted
	case errors.Is(err, txmsg.ErrOutcomeUnknown), receipt != nil && receipt.State == txmsg.StateUnknown:
		return outcomeUnknown
	default:
		return outcomeRolledBack
	}
}

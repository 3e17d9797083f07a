package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/txmsg"
)

// ackClock wraps the relay's Publisher and pairs each message's broker
// acknowledgement (Publish returning success for it) with the time its
// outbox transaction committed (Transact returning), by txmsg ID.
type ackClock struct {
	inner txmsg.Publisher

	mu        sync.Mutex
	committed map[string]commitRec // committed, not acknowledged yet
	acked     map[string]time.Time // acknowledged before the commit was recorded
	lat       latencies            // measured commit → ack
	wait      latencies            // measured commit → Publish called (claim, queueing)
	toClaim   latencies            // measured commit → start of the claim that took it (nudge, wake-up)
	claiming  latencies            // measured claim start → Publish called (claim and body queries)
	claimAt   atomic.Int64         // UnixNano of the relay's last claim SELECT; 0 before the first
	publish   latencies            // every Publish call's duration
	batch     []int                // every Publish call's size
	early     int                  // acknowledged before Transact returned
}

type commitRec struct {
	at       time.Time
	measured bool
}

func newAckClock(inner txmsg.Publisher) *ackClock {
	return &ackClock{inner: inner, committed: map[string]commitRec{}, acked: map[string]time.Time{}}
}

func (c *ackClock) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	called := time.Now()
	claimAt := time.Unix(0, c.claimAt.Load())
	err := c.inner.Publish(ctx, msgs...)
	now := time.Now()
	var be *txmsg.BatchError
	partial := errors.As(err, &be) && len(be.Errs) == len(msgs)
	if err != nil && !partial {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publish = append(c.publish, now.Sub(called))
	c.batch = append(c.batch, len(msgs))
	for i, m := range msgs {
		if partial && be.Errs[i] != nil {
			continue
		}
		if rec, ok := c.committed[m.ID]; ok {
			delete(c.committed, m.ID)
			if rec.measured {
				c.lat = append(c.lat, now.Sub(rec.at))
				c.wait = append(c.wait, called.Sub(rec.at))
				if claimAt.After(time.Unix(0, 0)) && called.After(claimAt) {
					// Transact returns just after its COMMIT, so a claim
					// can start a little before the recorded commit time.
					c.toClaim = append(c.toClaim, max(claimAt.Sub(rec.at), 0))
					c.claiming = append(c.claiming, called.Sub(claimAt))
				}
			}
		} else {
			c.acked[m.ID] = now
		}
	}
	return err
}

// commit records that id's transaction committed at t.
func (c *ackClock) commit(id string, t time.Time, measured bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.acked[id]; ok {
		// The relay, nudged by the commit, published before Transact
		// returned to us: the latency is below our resolution.
		delete(c.acked, id)
		if measured {
			c.lat = append(c.lat, max(at.Sub(t), 0))
			c.early++
		}
		return
	}
	c.committed[id] = commitRec{at: t, measured: measured}
}

func (c *ackClock) outstanding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.committed)
}

var _ txmsg.Publisher = (*ackClock)(nil)

// defaultLatencyRate is B5's rate when B3 did not run and -latency-rate is
// not set.
const defaultLatencyRate = 200

// runB5: outbox commit → broker acknowledgement. Commits arrive open-loop
// at a fixed rate (half of B3's), one relay with the in-process nudge
// publishes them.
func (b *bench) runB5(ctx context.Context) error {
	rate := b.cfg.LatencyRate
	if rate <= 0 {
		rate = defaultLatencyRate
		if v, ok := b.res.get("tps_b3"); ok {
			rate = v / 2
		}
	}
	if err := b.ordersTable(ctx); err != nil {
		return err
	}
	topic, err := b.env.topic(ctx, "b5")
	if err != nil {
		return err
	}
	ob, err := outbox.New(b.env.db, outbox.Config{Table: "outbox_b5", Logger: b.log})
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	defer b.env.dropTable(context.WithoutCancel(ctx), "outbox_b5", "outbox_b5_lease", "outbox_b5_relay")
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{
		Conn: txrmq.Conn{NameServers: []string{b.cfg.NameServer}, Logger: b.log}, Group: b.env.group("b5"),
		Topics: []string{topic},
	})
	if err != nil {
		return err
	}
	if err := pub.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()
	if err := warmPublisher(ctx, pub, topic); err != nil {
		return err
	}
	clock := newAckClock(pub)
	// The relay on a pool of its own, so that a callback can mark the start
	// of each claim (its SELECT … FOR UPDATE) without seeing other queries.
	relayDB, err := openPool(b.env.dsn, 4)
	if err != nil {
		return err
	}
	defer func() {
		if s, err := relayDB.DB(); err == nil {
			_ = s.Close()
		}
	}()
	err = relayDB.Callback().Query().Before("gorm:query").Register("txbench:claim_start", func(tx *gorm.DB) {
		if _, locking := tx.Statement.Clauses["FOR"]; locking {
			clock.claimAt.Store(time.Now().UnixNano())
		}
	})
	if err != nil {
		return err
	}
	relayOb, err := outbox.New(relayDB, outbox.Config{Table: ob.Table(), Logger: b.log})
	if err != nil {
		return err
	}
	relay, err := outbox.NewRelay(relayOb, clock, outbox.RelayConfig{Logger: b.log})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	var relayDone sync.WaitGroup
	relayDone.Add(1)
	go func() { defer relayDone.Done(); _ = relay.Run(relayCtx) }()
	defer func() { stopRelay(); relayDone.Wait() }()

	orders, err := txmsg.NewProducer(nudging{ob, relayOb}, txmsg.Topic[OrderCreated]{Name: topic})
	if err != nil {
		return err
	}
	var (
		sent, failed atomic.Int64
		firstErr     atomic.Value
		inflight     sync.WaitGroup
		seq          atomic.Int64
	)
	measureFrom := time.Now().Add(b.cfg.Warmup)
	end := measureFrom.Add(b.cfg.LatencyFor)
	sem := make(chan struct{}, 4*b.cfg.Workers)
	late := 0
	stopProgress := b.progress.ticker("B5", func() string {
		return fmt.Sprintf("offered %.0f/s, committed=%d, awaiting ack=%d", rate, sent.Load(), clock.outstanding())
	}, sent.Load)
	start := time.Now()
	issued := 0
	var cpu0 cpuSnap
	measuring := false
	for now := start; now.Before(end) && ctx.Err() == nil; now = time.Now() {
		if !measuring && now.After(measureFrom) {
			cpu0, measuring = cpuStart(), true
		}
		target := int(rate * now.Sub(start).Seconds())
		for ; issued < target; issued++ {
			select {
			case sem <- struct{}{}:
			default:
				late++ // all senders busy: the offered rate is not held
				sem <- struct{}{}
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				defer func() { <-sem }()
				o, evt := newOrder(seq.Add(1))
				id := txmsg.NewID()
				_, err := orders.Send(ctx, evt, func(ctx context.Context, tx *gorm.DB) error { return tx.Create(o).Error },
					txmsg.WithID(id), txmsg.WithKeys(o.OrderNo))
				at := time.Now()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				sent.Add(1)
				clock.commit(id, at, at.After(measureFrom))
			}()
		}
		time.Sleep(time.Millisecond)
	}
	cpu := cpu0.stop(0)
	inflight.Wait()
	measured := time.Since(measureFrom)
	deadline := time.Now().Add(30 * time.Second)
	for clock.outstanding() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stopProgress()
	clock.mu.Lock()
	lat, early, missing := clock.lat, clock.early, len(clock.committed)
	wait, publish, batches := clock.wait, clock.publish, clock.batch
	toClaim, claiming := clock.toClaim, clock.claiming
	clock.mu.Unlock()
	meanBatch := 0.0
	for _, n := range batches {
		meanBatch += float64(n)
	}
	if len(batches) > 0 {
		meanBatch /= float64(len(batches))
	}
	if len(lat) == 0 {
		e, _ := firstErr.Load().(error)
		return fmt.Errorf("no commit was acknowledged (failed sends %d, first error %v)", failed.Load(), e)
	}
	note := fmt.Sprintf("offered %.0f commits/s open-loop, 1 relay; commit -> Publish called p50 %.2f / p99 %.2f ms "+
		"(commit -> claim start p50 %.2f / p99 %.2f, claim start -> Publish p50 %.2f / p99 %.2f); "+
		"Publish call p50 %.2f / p99 %.2f ms, %.1f messages per call; %d acks raced Transact's return (counted as 0 ms)",
		rate, wait.pct(50), wait.pct(99), toClaim.pct(50), toClaim.pct(99), claiming.pct(50), claiming.pct(99),
		publish.pct(50), publish.pct(99), meanBatch, early)
	if late > 0 || missing > 0 || failed.Load() > 0 {
		note += fmt.Sprintf("; %d sends started late, %d commits never acknowledged, %d sends failed", late, missing, failed.Load())
	}
	if e, ok := firstErr.Load().(error); ok {
		note += "; first error: " + e.Error()
	}
	b.res.add(row{
		Phase: "B5", What: "outbox commit -> broker ack, relay + nudge", Rate: float64(len(lat)) / measured.Seconds(),
		Unit: "msg/s", P50: lat.pct(50), P99: lat.pct(99), Ops: int64(len(lat)), Errors: failed.Load() + int64(missing),
		Secs: measured.Seconds(), CPU: cpu, Note: note,
	})
	b.res.set("outbox_latency_p50_ms", lat.pct(50))
	b.res.set("outbox_latency_p99_ms", lat.pct(99))
	b.res.extra["outbox_latency_rate"] = rate
	b.res.extra["outbox_latency_p90_ms"] = lat.pct(90)
	b.res.extra["outbox_latency_p999_ms"] = lat.pct(99.9)
	b.res.extra["outbox_latency_max_ms"] = lat.pct(100)
	b.res.extra["outbox_wait_p99_ms"] = wait.pct(99)
	for name, l := range map[string]latencies{"commit_to_claim": toClaim, "claim_to_publish": claiming, "publish_call": publish} {
		b.res.extra["outbox_"+name+"_ms"] = map[string]float64{"p50": l.pct(50), "p99": l.pct(99), "p999": l.pct(99.9)}
	}
	b.res.extra["outbox_publish_call_p99_ms"] = publish.pct(99)
	b.res.extra["outbox_publish_mean_batch"] = meanBatch
	return nil
}

// nudging is an Outbox whose commits also wake the relays of another
// Outbox on the same table: the relay's, which reads through a pool of
// its own.
type nudging struct {
	*outbox.Outbox
	relay *outbox.Outbox
}

// Transact runs the Outbox's Transact, then wakes the relay.
func (n nudging) Transact(ctx context.Context, msg *txmsg.Message, local txmsg.LocalTx) (*txmsg.Receipt, error) {
	r, err := n.Outbox.Transact(ctx, msg, local)
	n.relay.Notify()
	return r, err
}

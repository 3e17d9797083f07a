package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/txmsg"
)

// ackClock wraps the relay's Publisher and pairs each message's broker
// acknowledgement (Publish returning success for it) with the time its
// outbox transaction committed (Transact returning), by txmsg ID. It also
// keeps, for every measured message, when the relay's claim that took it
// started and ended and when Publish was called: the stages of its
// latency (see tail.go).
type ackClock struct {
	inner txmsg.Publisher

	mu        sync.Mutex
	committed map[string]commitRec // committed, not acknowledged yet
	acked     map[string]time.Time // acknowledged before the commit was recorded
	stages    []stageRec           // measured messages, acknowledged
	publish   latencies            // every Publish call's duration
	calls     []span               // every Publish call, for the relay's timeline
	batch     []int                // every Publish call's size
	early     int                  // measured, acknowledged before Transact returned
	claimAt   atomic.Int64         // UnixNano of the start of the relay's last claim SELECT; 0 before the first
	claimEnd  atomic.Int64         // UnixNano of the end of that SELECT
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
	claimAt, claimEnd := time.Unix(0, c.claimAt.Load()), time.Unix(0, c.claimEnd.Load())
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
	c.calls = append(c.calls, span{kind: waitPublish, start: called, end: now})
	c.batch = append(c.batch, len(msgs))
	for i, m := range msgs {
		if partial && be.Errs[i] != nil {
			continue
		}
		rec, ok := c.committed[m.ID]
		if !ok {
			c.acked[m.ID] = now
			continue
		}
		delete(c.committed, m.ID)
		if rec.measured {
			c.stages = append(c.stages, newStageRec(rec.at, claimAt, claimEnd, called, now))
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
			c.stages = append(c.stages, stageRec{total: max(at.Sub(t), 0), early: true})
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

// take returns the measured messages' stages since the last take and
// forgets them.
func (c *ackClock) take() []stageRec {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stages
	c.stages = nil
	return s
}

var _ txmsg.Publisher = (*ackClock)(nil)

// defaultLatencyRate is B5's rate when B3 did not run and -latency-rate is
// not set.
const defaultLatencyRate = 200

// openResult is what an open-loop trial measured.
type openResult struct {
	loadResult
	late int // operations that found every sender busy: the rate was not held
}

// openLoop starts fn at rate per second for warm+d, each call in a
// goroutine of its own, at most limit at a time. measured says whether the
// call started after warm; the durations fn returns with record true for
// measured calls are the result's latencies.
func (b *bench) openLoop(ctx context.Context, label string, rate float64, warm, d time.Duration, limit int,
	fn func(ctx context.Context, seq int64, measured bool) (lat time.Duration, record bool, err error),
) openResult {
	var (
		res      openResult
		mu       sync.Mutex
		started  atomic.Int64
		inflight sync.WaitGroup
	)
	sem := make(chan struct{}, limit)
	stop := b.progress.ticker(label, func() string {
		return fmt.Sprintf("offered %.0f/s, started=%d", rate, started.Load())
	}, started.Load)
	defer stop()
	start := time.Now()
	measureFrom := start.Add(warm)
	end := measureFrom.Add(d)
	issued := 0
	var cpu0 cpuSnap
	measuring := false
	for now := start; now.Before(end) && ctx.Err() == nil; now = time.Now() {
		if !measuring && !now.Before(measureFrom) {
			cpu0, measuring = cpuStart(), true
		}
		target := int(rate * now.Sub(start).Seconds())
		for ; issued < target; issued++ {
			select {
			case sem <- struct{}{}:
			default:
				if measuring {
					res.late++
				}
				sem <- struct{}{}
			}
			inflight.Add(1)
			seq, measured := int64(issued), measuring
			go func() {
				defer inflight.Done()
				defer func() { <-sem }()
				started.Add(1)
				lat, record, err := fn(ctx, seq, measured)
				if !measured {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					res.errs++
					if res.firstEr == nil {
						res.firstEr = err
					}
					return
				}
				res.ops++
				if record {
					res.lat = append(res.lat, lat)
				}
			}()
		}
		time.Sleep(time.Millisecond)
	}
	if measuring {
		res.cpu = cpu0.stop(0)
		res.elapsed = time.Since(cpu0.at)
	}
	inflight.Wait()
	return res
}

// runB5: outbox commit → broker acknowledgement (B5), interleaved with its
// floor, a raw SendSync of the same message at the same rate (R5). Commits
// arrive open-loop at a fixed rate (half of B3's), one relay with the
// in-process nudge publishes them. Each ratio of percentiles is taken per
// round; the stages of the slowest 1 % are those of all B5 trials pooled.
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
	raw, err := b.rawProducer("r5")
	if err != nil {
		return err
	}
	defer func() { _ = raw.Shutdown() }()
	clock := newAckClock(pub)
	// The relay on a pool of its own, so that callbacks can mark the start
	// and end of each claim (its SELECT … FOR UPDATE) without seeing other
	// queries.
	// Its connections are dialled through the timing dialer, which keeps
	// the relay's timeline (timeline.go).
	relayDSN, err := mysql.ParseDSN(b.env.dsn)
	if err != nil {
		return err
	}
	if relayDSN.Net == "tcp" {
		registerTimedNet()
		relayDSN.Net = timedNet
	}
	relayDB, err := openPool(relayDSN.FormatDSN(), 4)
	if err != nil {
		return err
	}
	relayWire.take()
	defer func() {
		if s, err := relayDB.DB(); err == nil {
			_ = s.Close()
		}
	}()
	// The claim is built with its locking clause and, on a handle that
	// takes literals, run as one literal statement ending in FOR UPDATE:
	// the dry-run build is not the claim, the statement that runs is.
	locking := func(tx *gorm.DB) bool {
		if tx.DryRun {
			return false
		}
		if _, ok := tx.Statement.Clauses["FOR"]; ok {
			return true
		}
		return strings.Contains(tx.Statement.SQL.String(), " FOR UPDATE")
	}
	err = relayDB.Callback().Query().Before("gorm:query").Register("txbench:claim_start", func(tx *gorm.DB) {
		if locking(tx) {
			clock.claimAt.Store(time.Now().UnixNano())
		}
	})
	if err != nil {
		return err
	}
	err = relayDB.Callback().Query().After("gorm:query").Register("txbench:claim_end", func(tx *gorm.DB) {
		if locking(tx) {
			clock.claimEnd.Store(time.Now().UnixNano())
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
	limit := 4 * b.cfg.Workers
	obs := &b5Obs{rate: rate, clock: clock}
	var seq atomic.Int64
	outboxSide := side{name: "B5", trial: func(ctx context.Context, label string, warm, d time.Duration) (loadResult, error) {
		h0 := readRuntimeHists()
		res := b.openLoop(ctx, label, rate, warm, d, limit, func(ctx context.Context, _ int64, measured bool) (time.Duration, bool, error) {
			o, evt := newOrder(seq.Add(1))
			id := txmsg.NewID()
			_, err := orders.Send(ctx, evt, func(ctx context.Context, tx *gorm.DB) error { return tx.Create(o).Error },
				txmsg.WithID(id), txmsg.WithKeys(o.OrderNo))
			if err == nil {
				clock.commit(id, time.Now(), measured)
			}
			return 0, false, err
		})
		deadline := time.Now().Add(30 * time.Second)
		for clock.outstanding() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		h1 := readRuntimeHists()
		if n := clock.outstanding(); n > 0 && !isWarmUp(label) {
			obs.missing += n
			res.errs += int64(n)
		}
		got := clock.take()
		if !isWarmUp(label) {
			obs.stages = append(obs.stages, got...)
			obs.late += res.late
			obs.sched.add(h0.sched, h1.sched)
			obs.gc.add(h0.gc, h1.gc)
		}
		res.lat = res.lat[:0]
		for _, s := range got {
			res.lat = append(res.lat, s.total)
		}
		// The rate is the acknowledged commits', as a ratio of latencies
		// needs the rate only to be held.
		res.ops = int64(len(got))
		if len(got) == 0 && !isWarmUp(label) {
			return res.loadResult, fmt.Errorf("no commit was acknowledged (failed %d, first error %v)", res.errs, res.firstEr)
		}
		return res.loadResult, ctx.Err()
	}}
	rawSide := side{name: "R5", trial: func(ctx context.Context, label string, warm, d time.Duration) (loadResult, error) {
		res := b.openLoop(ctx, label, rate, warm, d, limit, func(ctx context.Context, _ int64, _ bool) (time.Duration, bool, error) {
			o, evt := newOrder(seq.Add(1))
			body, err := json.Marshal(evt)
			if err != nil {
				return 0, false, err
			}
			m := primitive.NewMessage(topic, body)
			m.WithKeys([]string{o.OrderNo})
			m.WithProperty(txmsg.PropertyID, txmsg.NewID())
			t0 := time.Now()
			err = sendRaw(ctx, raw, m)
			return time.Since(t0), true, err
		})
		if isWarmUp(label) {
			return res.loadResult, ctx.Err()
		}
		obs.late += res.late
		if res.ops == 0 {
			return res.loadResult, fmt.Errorf("no raw send succeeded: %v", res.firstEr)
		}
		return res.loadResult, ctx.Err()
	}}
	runs, err := b.interleave(ctx, "latency", []side{outboxSide, rawSide}, b.cfg.Trial)
	if err != nil {
		return err
	}
	obs.spans = relayWire.take()
	b.recordLatency(runs, obs)
	return nil
}

// b5Obs is what B5's trials observed besides their latencies.
type b5Obs struct {
	rate          float64
	late, missing int        // sends started late; commits never acknowledged
	stages        []stageRec // the measured messages' stages
	clock         *ackClock
	// spans is the relay's timeline over the phase: with its Publish
	// calls, it splits the commit → claim stage of the slowest 1 %, and
	// it gives the relay's transactions' durations.
	spans []span
	// sched and gc are the benchmark process's scheduling latencies and
	// GC pauses during the measured B5 trials (sched.go).
	sched, gc histAcc
}

// recordLatency records B5 and R5: each side's percentiles per round, the
// ratios of B5's to R5's per round, and the stages of B5's latency.
func (b *bench) recordLatency(runs trialRuns, obs *b5Obs) {
	rate, clock, stages, spans := obs.rate, obs.clock, obs.stages, obs.spans
	pcts := []struct {
		name string
		p    float64
	}{{"p50", 50}, {"p99", 99}, {"p999", 99.9}}
	for _, q := range pcts {
		var ob, raw, ratio []float64
		for i := range min(len(runs["B5"]), len(runs["R5"])) {
			a, r := runs["B5"][i].lat.pct(q.p), runs["R5"][i].lat.pct(q.p)
			ob, raw = append(ob, a), append(raw, r)
			if r > 0 {
				ratio = append(ratio, a/r)
			}
		}
		b.res.setSpread("outbox_latency_"+q.name+"_ms", ob)
		b.res.setSpread("raw_send_latency_"+q.name+"_ms", raw)
		if q.name == "p99" {
			b.res.setSpread("ratio_latency_p99_raw", ratio)
		} else if s, ok := newSpread(ratio); ok {
			b.res.extra["ratio_latency_"+q.name+"_raw"] = round3(s.Median)
		}
	}
	b.res.extra["outbox_latency_rate"] = rate
	m, _ := runs.merged("B5")
	b.res.extra["outbox_latency_p90_ms"] = m.lat.pct(90)
	b.res.extra["outbox_latency_max_ms"] = m.lat.pct(100)
	clock.mu.Lock()
	publish, batches, early := clock.publish, clock.batch, clock.early
	calls := slices.Clone(clock.calls)
	clock.mu.Unlock()
	tail := tailOf(stages, 1)
	cycles := cycleDurations(spans)
	if len(spans) > 0 {
		tail = tail.withWaits(append(spans, calls...))
		b.res.extra["relay_tx_ms"] = map[string]any{"count": len(cycles), "p50": round3(cycles.pct(50)), "p99": round3(cycles.pct(99)),
			"p999": round3(cycles.pct(99.9)), "max": round3(cycles.pct(100))}
		b.res.extra["relay_round_trips_ms"] = kindPercentiles(append(spans, calls...))
	}
	b.res.extra["outbox_stages_ms"] = stagePercentiles(stages)
	b.res.extra["outbox_sched_latency"] = obs.sched.summary()
	b.res.extra["outbox_gc_pauses"] = obs.gc.summary()
	b.res.extra["outbox_tail_1pct"] = tail.summary()

	meanBatch := 0.0
	for _, n := range batches {
		meanBatch += float64(n)
	}
	if len(batches) > 0 {
		meanBatch /= float64(len(batches))
	}
	b.res.extra["outbox_publish_mean_batch"] = meanBatch
	note := fmt.Sprintf("offered %.0f commits/s open-loop, 1 relay; Publish p50 %.2f / p99 %.2f ms, %.1f messages per call; "+
		"%d acks raced Transact's return (counted as 0 ms); slowest 1%%: %s",
		rate, publish.pct(50), publish.pct(99), meanBatch, early, tail)
	if len(cycles) > 0 {
		note += fmt.Sprintf("; relay transactions p50 %.1f / p99 %.1f ms", cycles.pct(50), cycles.pct(99))
	}
	note += fmt.Sprintf("; goroutines waited for a core p99 %.2f / max %.1f ms; GC pauses %d, p99 %.2f / max %.1f ms",
		obs.sched.pct(99), obs.sched.pct(100), obs.gc.total(), obs.gc.pct(99), obs.gc.pct(100))
	if obs.late > 0 || obs.missing > 0 {
		note += fmt.Sprintf("; %d sends started late, %d commits never acknowledged", obs.late, obs.missing)
	}
	if x, ok := runs.row("B5", "outbox commit -> broker ack, relay + nudge", "msg/s"); ok {
		x.Note = strings.TrimPrefix(x.Note+"; "+note, "; ")
		b.res.add(x)
	}
	if x, ok := runs.row("R5", "floor of B5: raw SendSync, same message and rate", "msg/s"); ok {
		b.res.add(x)
	}
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

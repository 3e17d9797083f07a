package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/txmsg"
)

// backlogMsg is the i-th message of a backlog: the same shape as the
// events of B0-B3 (an OrderCreated body of about 150 bytes, the order
// number as a key).
func backlogMsg(topic string, i int64) *txmsg.Message {
	_, evt := newOrder(i)
	body, _ := json.Marshal(evt)
	return &txmsg.Message{ID: txmsg.NewID(), Topic: topic, Keys: []string{evt.OrderNo}, Body: body}
}

// fillChunk is the number of messages per EnqueueTx call when filling a
// backlog. Each call is one multi-row INSERT: 1,000 rows stay far below
// the server's 65,535 placeholders per prepared statement.
const fillChunk = 1000

// fillBacklog writes n pending rows to table through the library's
// EnqueueTx, in transactions of fillChunk rows, from FillWorkers writers.
// This is setup, not measured.
func (b *bench) fillBacklog(ctx context.Context, label, table, topic string, n int) error {
	return b.fillBacklogAt(ctx, label, table, topic, n, time.Time{})
}

// fillBacklogAt is fillBacklog with rows due at due (txmsg.WithDeliverAt);
// the zero time writes rows due at once.
func (b *bench) fillBacklogAt(ctx context.Context, label, table, topic string, n int, due time.Time) error {
	db, err := openPool(b.env.fillDSN, b.cfg.FillWorkers+2)
	if err != nil {
		return err
	}
	defer func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	}()
	ob, err := outbox.New(db, outbox.Config{Table: table, Logger: b.log})
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	var next, done atomic.Int64
	stop := b.progress.ticker(label, func() string { return fmt.Sprintf("filling %s: %d/%d rows", table, done.Load(), n) }, done.Load)
	defer stop()
	t0 := time.Now()
	g := newGroup(ctx)
	gctx := g.ctx
	for range b.cfg.FillWorkers {
		g.Go(func() error {
			msgs := make([]*txmsg.Message, 0, fillChunk)
			for {
				start := next.Add(fillChunk) - fillChunk
				if start >= int64(n) {
					return nil
				}
				end := min(start+fillChunk, int64(n))
				msgs = msgs[:0]
				for i := start; i < end; i++ {
					m := backlogMsg(topic, i)
					m.DeliverAt = due
					msgs = append(msgs, m)
				}
				err := db.WithContext(gctx).Transaction(func(tx *gorm.DB) error {
					return ob.EnqueueTx(gctx, tx, msgs...)
				})
				if err != nil {
					return fmt.Errorf("fill %s: %w", table, err)
				}
				done.Add(end - start)
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	b.progress.printf("%-4s filled %d rows in %s (%.0f rows/s)", label, n, time.Since(t0).Round(time.Millisecond), float64(n)/time.Since(t0).Seconds())
	return nil
}

// drain fills a backlog of n rows, then has a child process drain it with
// relays relays and reports what the child measured.
func (b *bench) drain(ctx context.Context, label, purpose string, n, relays int) (*childResult, error) {
	topic, err := b.env.topic(ctx, purpose)
	if err != nil {
		return nil, err
	}
	table := "outbox_" + purpose
	defer b.env.dropTable(context.WithoutCancel(ctx), table, table+"_lease", table+"_relay")
	if err := b.fillBacklog(ctx, label, table, topic, n); err != nil {
		return nil, err
	}
	// Let InnoDB's background flushing and purge catch up with the fill,
	// so the drain does not start on top of its work.
	sleepCtx(ctx, b.cfg.Settle)
	spec := childSpec{
		Label: label, DSN: b.env.dsn, NameServer: b.cfg.NameServer, Group: b.env.group(purpose),
		Table: table, Topic: topic, Relays: relays, BatchSize: b.cfg.RelayBatchSize, Expect: n,
	}
	if b.cfg.RelayCPUProf != "" {
		spec.CPUProfile = b.cfg.RelayCPUProf + "." + purpose
	}
	return b.runChild(ctx, spec)
}

func (b *bench) runChild(ctx context.Context, spec childSpec) (*childResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// The environment variable makes the process a relay child before it
	// parses any flag. The argument matters only when self is the test
	// binary (the smoke test), should its TestMain ever not look first.
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = b.progress.w
	cpu0 := cpuStart()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("relay child: %w", err)
	}
	ps := cmd.ProcessState
	childTicks := uint64((ps.UserTime() + ps.SystemTime()).Seconds() * clockTicks)
	cpu := cpu0.stop(childTicks)
	var res childResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("relay child printed %q: %w", out.String(), err)
	}
	res.CPU = cpu
	return &res, nil
}

// runB4: relays drain a pre-filled backlog (in a child process), then R0
// sends as many messages of the same shape with the raw client, one
// SendSync per message, from as many workers as there were relays. The
// pair runs twice: with -relays relays (the headline), and with -workers
// relays, the concurrency of the other phases.
func (b *bench) runB4(ctx context.Context) error {
	relay, raw, err := b.drainVsRaw(ctx, "B4", "R0", "b4", b.cfg.Relays)
	if err != nil {
		return err
	}
	b.res.set("relay_msgs_per_s", relay)
	b.res.set("raw_send_msgs_per_s", raw)
	b.res.ratio("ratio_relay_raw", "relay_msgs_per_s", "raw_send_msgs_per_s")
	if b.cfg.Workers != b.cfg.Relays {
		relay, raw, err := b.drainVsRaw(ctx, "B4w", "R0w", "b4w", b.cfg.Workers)
		if err != nil {
			return err
		}
		b.res.extra["relay_msgs_per_s_at_workers"] = relay
		b.res.extra["raw_send_msgs_per_s_at_workers"] = raw
		b.res.extra["ratio_relay_raw_at_workers"] = relay / raw
	}
	return nil
}

func (b *bench) drainVsRaw(ctx context.Context, drainLabel, rawLabel, purpose string, concurrency int) (relay, raw float64, err error) {
	res, err := b.drain(ctx, drainLabel, purpose, b.cfg.Backlog, concurrency)
	if err != nil {
		return 0, 0, err
	}
	b.res.add(row{
		Phase: drainLabel, What: fmt.Sprintf("%d relays drain %d-row backlog", concurrency, b.cfg.Backlog), Rate: res.PerSecond,
		Unit: "msg/s", Ops: res.Drained, Secs: res.Seconds, CPU: res.CPU,
		Note: fmt.Sprintf("relay process peak RSS %.1f MiB; %d Publish calls", kib2mib(res.PeakRSSKiB), res.Publishes),
	})

	_, raw, err = b.rawSend(ctx, rawLabel, purpose, concurrency)
	return res.PerSecond, raw, err
}

// rawSend sends -backlog messages of the backlog's shape with the raw
// client, one SendSync per message, from concurrency workers.
func (b *bench) rawSend(ctx context.Context, rawLabel, purpose string, concurrency int) (relay, raw float64, err error) {
	topic, err := b.env.topic(ctx, purpose+"_raw")
	if err != nil {
		return 0, 0, err
	}
	p, err := b.rawProducer(purpose + "_raw")
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = p.Shutdown() }()
	if err := sendRaw(ctx, p, primitive.NewMessage(topic, []byte("warm-up"))); err != nil {
		return 0, 0, fmt.Errorf("%s warm-up send: %w", rawLabel, err)
	}
	spec := loadSpec{name: rawLabel, workers: concurrency, count: b.cfg.Backlog}
	r0, err := closedLoop(ctx, b.progress, spec, func(ctx context.Context, seq int64) error {
		m := backlogMsg(topic, seq)
		pm := primitive.NewMessage(m.Topic, m.Body)
		pm.WithKeys(m.AllKeys())
		pm.WithProperty(txmsg.PropertyID, m.ID)
		return sendRaw(ctx, p, pm)
	})
	if err != nil {
		return 0, 0, err
	}
	b.res.add(row{
		Phase: rawLabel, What: fmt.Sprintf("raw SendSync x %d, %d workers", b.cfg.Backlog, concurrency), Rate: r0.perSecond(),
		Unit: "msg/s", P50: r0.lat.pct(50), P99: r0.lat.pct(99), Ops: r0.ops, Errors: r0.errs, Secs: r0.elapsed.Seconds(), CPU: r0.cpu,
	})
	return 0, r0.perSecond(), nil
}

// runB7: the headline drain with the big backlog, for the rate and the
// relay process's resident memory.
func (b *bench) runB7(ctx context.Context) error {
	res, err := b.drain(ctx, "B7", "b7", b.cfg.BigBacklog, b.cfg.Relays)
	if err != nil {
		return err
	}
	b.res.add(row{
		Phase: "B7", What: fmt.Sprintf("%d relays drain %d-row backlog", b.cfg.Relays, b.cfg.BigBacklog), Rate: res.PerSecond,
		Unit: "msg/s", Ops: res.Drained, Secs: res.Seconds, CPU: res.CPU,
		Note: fmt.Sprintf("relay process peak RSS %.1f MiB (VmHWM %.1f MiB); %d Publish calls",
			kib2mib(res.PeakRSSKiB), kib2mib(res.HWMKiB), res.Publishes),
	})
	b.res.extra["relay_msgs_per_s_big"] = res.PerSecond
	b.res.set("relay_rss_mib_1m", kib2mib(max(res.PeakRSSKiB, res.HWMKiB)))
	if base, ok := b.res.get("relay_msgs_per_s"); ok && base > 0 {
		b.res.set("ratio_drain_1m_vs_100k", res.PerSecond/base)
	}
	return nil
}

// warmPublisher publishes one message to topic, so that the publisher
// holds the topic's route before the measured sends start.
func warmPublisher(ctx context.Context, pub txmsg.Publisher, topic string) error {
	if err := pub.Publish(ctx, &txmsg.Message{Topic: topic, Body: []byte("warm-up")}); err != nil {
		return fmt.Errorf("warm-up publish to %s: %w", topic, err)
	}
	return nil
}

func kib2mib(k int64) float64 { return float64(k) / 1024 }

// ackCounter is a relay hook that counts the messages the broker
// acknowledged and the Publish calls made.
type ackCounter struct {
	acked atomic.Int64
	calls atomic.Int64
}

// OnRelayBatch implements txmsg.HookRelayBatch: it is called once per
// Publish call, with the rows claimed and those not published.
func (a *ackCounter) OnRelayBatch(_ context.Context, _, _ string, size, failed int, _ time.Duration) {
	a.calls.Add(1)
	a.acked.Add(int64(size - failed))
}

var _ txmsg.HookRelayBatch = (*ackCounter)(nil)

// group runs goroutines and keeps the first error, cancelling the others.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func newGroup(ctx context.Context) *group {
	g := &group{}
	g.ctx, g.cancel = context.WithCancel(ctx)
	return g
}

func (g *group) Go(fn func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := fn(); err != nil {
			g.once.Do(func() { g.err = err; g.cancel() })
		}
	}()
}

func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
)

// delayStep spreads the due times of the lateness phases over the
// fractions of a second (27 steps of 37 ms), so that the broker's timer
// slots are hit at every offset.
const (
	delayStep  = 37 * time.Millisecond
	delaySteps = 27
)

// runDelay: delayed events.
//
//	DR  the broker's own timer: plain messages sent with the raw client and
//	    TIMER_DELIVER_MS set to their due time (RocketMQ 5.x)
//	DT  transactional mode: Producer.Send with WithDeliverAt, the stack's
//	    Forwarder holding the message until due
//	DL  local-table mode: the same through the outbox, the relay
//	    publishing each row when due
//	DN  relays drain -backlog due rows, in interleaved rounds with
//	DF  the same in a table that also holds -future-rows rows due in a day
func (b *bench) runDelay(ctx context.Context) error {
	raw, err := b.delayRaw(ctx)
	if err != nil {
		return err
	}
	b.lateness("DR", "broker timer, raw client (TIMER_DELIVER_MS = due)", "raw", raw)
	tx, err := b.delayStack(ctx, "DT", true)
	if err != nil {
		return err
	}
	b.lateness("DT", "txmsg transactional + Forwarder, WithDeliverAt", "tx", tx)
	local, err := b.delayStack(ctx, "DL", false)
	if err != nil {
		return err
	}
	b.lateness("DL", "txmsg outbox + relay, WithDeliverAt", "local", local)
	b.res.ratio("ratio_delay_late_p99_tx_vs_raw", "delay_late_p99_ms_tx", "delay_late_p99_ms_raw")
	b.res.ratio("ratio_delay_late_p99_local_vs_raw", "delay_late_p99_ms_local", "delay_late_p99_ms_raw")

	return b.drainRounds(ctx)
}

// lateness records one lateness phase: a row and its p50/p99/max keys.
func (b *bench) lateness(phase, what, suffix string, late latencies) {
	slices.Sort(late)
	early := 0
	for _, l := range late {
		if l < 0 {
			early++
		}
	}
	b.res.add(row{Phase: phase, What: what, Unit: "events", Ops: int64(len(late)),
		P50: late.pct(50), P99: late.pct(99),
		Note: fmt.Sprintf("lateness after the due time; max %.1f ms, %d early", ms(late[len(late)-1]), early)})
	b.res.set("delay_late_p50_ms_"+suffix, late.pct(50))
	b.res.set("delay_late_p99_ms_"+suffix, late.pct(99))
	b.res.set("delay_late_max_ms_"+suffix, ms(late[len(late)-1]))
	b.res.extra["delay_early_"+suffix] = early
}

// dueAt is the due time of the i-th event of a lateness phase sent now.
func dueAt(c *config, i int) time.Time {
	return time.Now().Add(c.DelayMin + time.Duration(i%delaySteps)*delayStep)
}

// arrivals is a consumer recording when each txmsg ID first arrived,
// against the due time it carries.
type arrivals struct {
	mu   sync.Mutex
	late map[string]time.Duration
	all  chan struct{}
	want int
	pc   rmq.PushConsumer
}

// arrivalsOf starts a consumer of topic in a group of its own, which
// records the lateness of the first want messages.
func (b *bench) arrivalsOf(topic, purpose string, want int) (*arrivals, error) {
	a := &arrivals{late: map[string]time.Duration{}, all: make(chan struct{}), want: want}
	pc, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.cfg.NameServer})),
		consumer.WithGroupName(b.env.group(purpose+"_c")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return nil, err
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		now := time.Now()
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, m := range msgs {
			due, ok := txmsg.ParseDeliverAt(m.GetProperty(txmsg.PropertyDeliverAt))
			id := m.GetProperty(txmsg.PropertyID)
			if _, seen := a.late[id]; !ok || seen || len(a.late) >= a.want {
				continue
			}
			a.late[id] = now.Sub(due)
			if len(a.late) == a.want {
				close(a.all)
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return nil, err
	}
	if err := pc.Start(); err != nil {
		return nil, err
	}
	a.pc = pc
	return a, nil
}

// wait waits for every message, at most until timeout after the last due
// time, and stops the consumer.
func (a *arrivals) wait(ctx context.Context, label string, lastDue time.Time) (latencies, error) {
	defer func() { _ = a.pc.Shutdown() }()
	t := time.NewTimer(time.Until(lastDue) + time.Minute)
	defer t.Stop()
	select {
	case <-a.all:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.late) < a.want {
		return nil, fmt.Errorf("%s: %d of %d delayed events arrived within a minute of the last due time", label, len(a.late), a.want)
	}
	late := make(latencies, 0, len(a.late))
	for _, l := range a.late {
		late = append(late, l)
	}
	return late, nil
}

// delayRaw sends -delay-events plain messages with the broker's timer set
// to their due times, one at a time, and measures their lateness.
func (b *bench) delayRaw(ctx context.Context) (latencies, error) {
	topic, err := b.env.topic(ctx, "dr")
	if err != nil {
		return nil, err
	}
	p, err := b.rawProducer("dr")
	if err != nil {
		return nil, err
	}
	defer func() { _ = p.Shutdown() }()
	a, err := b.arrivalsOf(topic, "dr", b.cfg.DelayEvents)
	if err != nil {
		return nil, err
	}
	b.progress.printf("DR   sending %d timer messages", b.cfg.DelayEvents)
	var last time.Time
	for i := range b.cfg.DelayEvents {
		m := backlogMsg(topic, int64(i))
		due := dueAt(b.cfg, i)
		pm := primitive.NewMessage(topic, m.Body)
		pm.WithProperty(txmsg.PropertyID, m.ID)
		pm.WithProperty(txmsg.PropertyDeliverAt, txmsg.FormatDeliverAt(due))
		pm.WithProperty("TIMER_DELIVER_MS", strconv.FormatInt(due.UnixMilli(), 10))
		if err := sendRaw(ctx, p, pm); err != nil {
			_ = a.pc.Shutdown()
			return nil, fmt.Errorf("DR send: %w", err)
		}
		last = due
	}
	return a.wait(ctx, "DR", last)
}

// delayStack sends -delay-events delayed events through a whole stack of
// the mode, one at a time, and measures their lateness.
func (b *bench) delayStack(ctx context.Context, label string, transactional bool) (latencies, error) {
	purpose := "dl"
	if transactional {
		purpose = "dt"
	}
	topic, err := b.env.topic(ctx, purpose)
	if err != nil {
		return nil, err
	}
	if err := b.ordersTable(ctx); err != nil {
		return nil, err
	}
	base := stack.Config{
		RocketMQ: txrmq.Conn{NameServers: []string{b.cfg.NameServer}},
		Group:    b.env.group(purpose), Topics: []string{topic}, Logger: b.log,
	}
	var st *stack.Stack
	if transactional {
		delayTopic, err := b.env.topic(ctx, purpose+"_delayed")
		if err != nil {
			return nil, err
		}
		st, err = stack.Transactional(b.env.db, stack.TransactionalConfig{Config: base,
			Producer: txrmq.TransactionalConfig{DelayTopic: delayTopic}})
		if err != nil {
			return nil, err
		}
	} else {
		table := "outbox_" + purpose
		defer b.env.dropTable(context.WithoutCancel(ctx), table, table+"_lease", table+"_relay")
		st, err = stack.Outbox(b.env.db, stack.OutboxConfig{Config: base, Outbox: outbox.Config{Table: table}})
		if err != nil {
			return nil, err
		}
	}
	defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
	if err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	if err := st.Start(ctx); err != nil {
		return nil, err
	}
	if fw := st.Forwarder(); fw != nil {
		b.res.extra["delay_forwarder_mode"] = string(fw.Mode())
	}
	prod, err := txmsg.NewProducer(st, txmsg.Topic[OrderCreated]{Name: topic})
	if err != nil {
		return nil, err
	}
	a, err := b.arrivalsOf(topic, purpose, b.cfg.DelayEvents)
	if err != nil {
		return nil, err
	}
	b.progress.printf("%-4s sending %d delayed events", label, b.cfg.DelayEvents)
	var last time.Time
	for i := range b.cfg.DelayEvents {
		o, evt := newOrder(int64(i))
		due := dueAt(b.cfg, i)
		_, err := prod.Send(ctx, evt, func(ctx context.Context, tx *gorm.DB) error { return tx.Create(o).Error },
			txmsg.WithDeliverAt(due), txmsg.WithKeys(evt.OrderNo))
		if err != nil {
			_ = a.pc.Shutdown()
			return nil, fmt.Errorf("%s send: %w", label, err)
		}
		last = due
	}
	return a.wait(ctx, label, last)
}

// drainTable is the table of one side of the DN/DF rounds: created once,
// with its future rows (DF), and drained anew each round.
type drainTable struct {
	label, table, topic, group string
	future                     int
}

// drainRounds measures the cost of future rows to the relay's claim of due
// rows. DN and DF each keep one table for the whole phase; DF's gets its
// -future-rows rows due in a day once, before the first round. Each of
// -trials rounds, after one warm-up round, writes -backlog due rows to
// both tables and has a relay child drain each, DN first in the first
// round, DF first in the next, and so on; the ratio is taken per round and reported as the median over
// the rounds with its range, like the interleaved business phases. The
// sent rows stay: both tables gain the same number per round.
func (b *bench) drainRounds(ctx context.Context) error {
	sides := []*drainTable{{label: "DN", table: "outbox_dn"}, {label: "DF", table: "outbox_df", future: b.cfg.FutureRows}}
	for _, d := range sides {
		topic, err := b.env.topic(ctx, strings.ToLower(d.label))
		if err != nil {
			return err
		}
		d.topic, d.group = topic, b.env.group(strings.ToLower(d.label))
		defer b.env.dropTable(context.WithoutCancel(ctx), d.table, d.table+"_lease", d.table+"_relay")
		if d.future > 0 {
			if err := b.fillFuture(ctx, d.label, d.table, d.topic, d.future); err != nil {
				return err
			}
		}
	}
	rates := map[string][]float64{}
	rows := map[string][]row{}
	var ratios []float64
	// Round 0 is a warm-up, not counted: its first drain would otherwise
	// meet the background writes of the million rows just copied.
	for round := range b.cfg.Trials + 1 {
		order := sides
		if round%2 == 0 {
			order = []*drainTable{sides[1], sides[0]}
		}
		got := map[string]float64{}
		for _, d := range order {
			x, err := b.drainDue(ctx, d)
			if err != nil {
				return err
			}
			got[d.label] = x.Rate
			if round == 0 {
				continue
			}
			rates[d.label] = append(rates[d.label], x.Rate)
			rows[d.label] = append(rows[d.label], x)
		}
		if round == 0 {
			b.progress.printf("DN/DF warm-up round: DN %.0f msg/s, DF %.0f msg/s (not counted)", got["DN"], got["DF"])
			continue
		}
		if got["DN"] > 0 {
			ratios = append(ratios, got["DF"]/got["DN"])
		}
		b.progress.printf("DN/DF round %d/%d: DN %.0f msg/s, DF %.0f msg/s, ratio %.3f", round, b.cfg.Trials, got["DN"], got["DF"], got["DF"]/got["DN"])
	}
	for _, d := range sides {
		b.res.add(medianRow(rows[d.label]))
	}
	b.res.setSpread("delay_drain_msgs_per_s_none", rates["DN"])
	b.res.setSpread("delay_drain_msgs_per_s_future", rates["DF"])
	b.res.setSpread("ratio_drain_future_vs_none", ratios)
	return nil
}

// roundSettle is the pause before each drain of the DN/DF rounds: five
// times -settle (10 s by default), since InnoDB is still cleaning up
// after the previous drain's 100,000 updates. With -settle's 2 s, the
// drain that ran second in a round was up to a third slower than the one
// that ran first, whichever side it was.
func roundSettle(settle time.Duration) time.Duration { return 5 * settle }

// medianRow returns the row of the trial with the median rate (of an
// even number, the slower of the middle two), with the range and number
// of all.
func medianRow(rs []row) row {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b row) int { return cmp.Compare(a.Rate, b.Rate) })
	x := sorted[(len(sorted)-1)/2]
	x.RateMin, x.RateMax, x.Trials = sorted[0].Rate, sorted[len(sorted)-1].Rate, len(sorted)
	return x
}

// drainDue writes -backlog due rows to d's table and has a relay child
// drain them; it returns the drain's row.
func (b *bench) drainDue(ctx context.Context, d *drainTable) (row, error) {
	if err := b.fillBacklog(ctx, d.label, d.table, d.topic, b.cfg.Backlog); err != nil {
		return row{}, err
	}
	sleepCtx(ctx, roundSettle(b.cfg.Settle))
	res, err := b.runChild(ctx, childSpec{
		Label: d.label, DSN: b.env.dsn, NameServer: b.cfg.NameServer, Group: d.group,
		Table: d.table, Topic: d.topic, Relays: b.cfg.Relays, BatchSize: b.cfg.RelayBatchSize, Expect: b.cfg.Backlog,
		Waiting: d.future > 0,
	})
	if err != nil {
		return row{}, err
	}
	return row{
		Phase: d.label, What: fmt.Sprintf("%d relays drain %d due rows, %d rows due in a day", b.cfg.Relays, b.cfg.Backlog, d.future),
		Rate: res.PerSecond, Unit: "msg/s", Ops: res.Drained, Secs: res.Seconds, CPU: res.CPU,
		Note: fmt.Sprintf("relay process peak RSS %.1f MiB; %d Publish calls", kib2mib(res.PeakRSSKiB), res.Publishes),
	}, nil
}

// futureCopyMax bounds the rows one INSERT ... SELECT of fillFuture copies.
const futureCopyMax = 50_000

// fillFuture writes n rows due in a day to table: the first fillChunk
// through the library (EnqueueTx), the rest by copying rows already there
// with INSERT ... SELECT, a new msg_id suffix each round, so that a
// million rows take seconds rather than minutes. This is setup, not
// measured.
func (b *bench) fillFuture(ctx context.Context, label, table, topic string, n int) error {
	first := min(n, fillChunk)
	if err := b.fillBacklogAt(ctx, label, table, topic, first, time.Now().Add(24*time.Hour)); err != nil {
		return err
	}
	t0 := time.Now()
	const cols = "topic, tag, `keys`, sharding_key, bucket, body, properties, status, attempts, next_attempt_at, last_error, created_at, updated_at, deliver_at"
	q := fmt.Sprintf("INSERT INTO `%s` (msg_id, %s) SELECT CONCAT(msg_id, '.', ?), %s FROM `%s` WHERE deliver_at IS NOT NULL ORDER BY id LIMIT ?",
		table, cols, cols, table)
	for have, round := first, 1; have < n; round++ {
		k := min(have, n-have, futureCopyMax)
		if err := b.env.db.WithContext(ctx).Exec(q, round, k).Error; err != nil {
			return fmt.Errorf("fill %s with future rows: %w", table, err)
		}
		have += k
	}
	b.progress.printf("%-4s copied %d rows due in a day in %s", label, n-first, time.Since(t0).Round(time.Millisecond))
	return nil
}

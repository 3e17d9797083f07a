package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

// runB6: checker.Resolve answering check-backs, against its floor, then
// (runB6c) the same answered from a Transactional's outcome cache. The
// barrier table is pre-filled with ResolveRows committed and ResolveRows
// rolled-back rows. B6 asks, in equal parts, for a committed ID, a
// rolled-back ID and an ID the barrier has never seen (which Resolve
// records as rolled back: an insert and a commit). B6k asks for the known
// IDs alone, and P6, its floor, reads the same IDs' state with one bare
// primary-key SELECT, a literal query on the same pool: a known ID is one
// round trip either way, so B6k/P6 is what txmsg adds to that round trip.
//
// rocketmq-client-go answers check-backs from one goroutine, one at a time,
// so the phase also measures one worker alone (B6s, B6ks, P6s): the rate a
// single producer process can answer. The three sides of each worker count
// run interleaved.
func (b *bench) runB6(ctx context.Context) error {
	const table = "barrier_b6"
	chk, err := checker.New(b.env.db, checker.Config{Table: table, Logger: b.log})
	if err != nil {
		return err
	}
	if err := chk.Migrate(ctx); err != nil {
		return err
	}
	defer b.env.dropTable(context.WithoutCancel(ctx), table)
	committed, rolledBack, err := b.fillBarrier(ctx, table)
	if err != nil {
		return err
	}
	var wrong atomic.Int64
	pick := func(seq int64, unknown bool) (id string, want txmsg.LocalState) {
		n := int64(2)
		if unknown {
			n = 3
		}
		switch seq % n {
		case 0:
			return committed[rand.N(len(committed))], txmsg.StateCommitted
		case 1:
			return rolledBack[rand.N(len(rolledBack))], txmsg.StateRolledBack
		}
		return txmsg.NewID(), txmsg.StateRolledBack
	}
	resolve := func(unknown bool) op {
		return func(ctx context.Context, seq int64) error {
			id, want := pick(seq, unknown)
			got, err := chk.Resolve(ctx, id)
			if err != nil {
				return err
			}
			if got != want {
				wrong.Add(1)
				return fmt.Errorf("resolve %s: got %s, want %s", id, got, want)
			}
			return nil
		}
	}
	db := b.env.db
	sel := func(ctx context.Context, seq int64) error {
		id, want := pick(seq, false)
		var state string
		if err := db.WithContext(ctx).Raw("SELECT state FROM `" + table + "` WHERE tx_id = " + quote(id)).Scan(&state).Error; err != nil {
			return err
		}
		if (state == checker.StateCommitted) != (want == txmsg.StateCommitted) {
			wrong.Add(1)
			return fmt.Errorf("select %s: got %q, want %s", id, state, want)
		}
		return nil
	}
	for _, g := range []struct {
		suffix, group string
		workers       int
		what          string
	}{
		{"", "resolve", b.cfg.Workers, fmt.Sprintf("%d workers", b.cfg.Workers)},
		{"s", "resolve-serial", 1, "1 worker (the client's check-back goroutine)"},
	} {
		names := [3]string{"B6" + g.suffix, "B6k" + g.suffix, "P6" + g.suffix}
		sides := []side{
			b.closedSide(names[0], g.workers, resolve(true)),
			b.closedSide(names[1], g.workers, resolve(false)),
			b.closedSide(names[2], g.workers, sel),
		}
		// A check-back takes well under a millisecond: half a trial is
		// thousands of them.
		runs, err := b.interleave(ctx, g.group, sides, b.cfg.Trial/2)
		if err != nil {
			return err
		}
		for i, what := range []string{
			"checker.Resolve, 1/3 each committed/rolled back/unknown, ",
			"checker.Resolve, committed and rolled-back IDs, ",
			"floor of B6k: bare primary-key SELECT of the same IDs, ",
		} {
			if x, ok := runs.row(names[i], what+g.what, "resolve/s"); ok {
				b.res.add(x)
			}
		}
		m, _ := runs.merged(names[0])
		if g.suffix == "" {
			b.res.setSpread("resolve_per_s", runs.rates(names[0]))
			b.res.set("resolve_p99_ms", m.lat.pct(99))
			b.res.setSpread("resolve_known_per_s", runs.rates(names[1]))
			b.res.setSpread("select_per_s", runs.rates(names[2]))
			b.res.setSpread("ratio_resolve_select", runs.ratios(names[1], names[2]))
		} else {
			b.res.setSpread("resolve_serial_per_s", runs.rates(names[0]))
			b.res.extra["resolve_serial_p99_ms"] = m.lat.pct(99)
			b.res.setSpread("resolve_known_serial_per_s", runs.rates(names[1]))
			b.res.setSpread("select_serial_per_s", runs.rates(names[2]))
			b.res.setSpread("ratio_resolve_serial_select", runs.ratios(names[1], names[2]))
		}
	}
	if n := wrong.Load(); n > 0 {
		return fmt.Errorf("%d check-backs got the wrong answer", n)
	}
	return b.runB6c(ctx, chk)
}

// runB6c: the check-backs of B6 and B6s answered by a Transactional from
// its outcome cache. ResolveCachedTx transactions go through Transact
// first, half committed and half rolled back (the local function fails);
// the check-backs then ask for their half messages at random, through
// Transactional.ResolveCheckBack, the path the broker's check-backs take.
// Every answer is checked, and every one must come from the cache.
func (b *bench) runB6c(ctx context.Context, chk *checker.Checker) error {
	topic, err := b.env.topic(ctx, "b6c")
	if err != nil {
		return err
	}
	tr, err := txrmq.NewTransactional(b.env.db, chk, txrmq.TransactionalConfig{
		Conn: txrmq.Conn{NameServers: []string{b.cfg.NameServer}, Logger: b.log}, Group: b.env.group("b6c"),
		Topics: []string{topic},
	})
	if err != nil {
		return err
	}
	if err := tr.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = tr.Close(context.WithoutCancel(ctx)) }()
	receipts, err := b.fillOutcomes(ctx, tr, topic)
	if err != nil {
		return err
	}
	var wrong atomic.Int64
	resolve := func(ctx context.Context, _ int64) error {
		r := receipts[rand.N(len(receipts))]
		got, err := tr.ResolveCheckBack(ctx, r.ID, r.BrokerMessageID)
		if err != nil {
			return err
		}
		if got != r.State {
			wrong.Add(1)
			return fmt.Errorf("resolve %s: got %s, want %s", r.ID, got, r.State)
		}
		return nil
	}
	// A hit takes well under a microsecond, and closedLoop keeps every
	// latency: a fifth of B6's time is millions of samples already.
	measure := b.cfg.ResolveFor / 5
	before := tr.CheckBackCacheStats()
	res, err := closedLoop(ctx, b.progress, loadSpec{name: "B6c", workers: b.cfg.Workers, warmup: b.cfg.Warmup / 3, duration: measure}, resolve)
	if err != nil {
		return err
	}
	b.res.add(res.row("B6c", fmt.Sprintf("Transactional check-back from the outcome cache, %d workers", b.cfg.Workers), "resolve/s"))
	b.res.set("resolve_cached_per_s", res.perSecond())
	b.res.set("resolve_cached_p99_ms", res.lat.pct(99))
	b.res.extra["resolve_cached_p50_us"] = 1000 * res.lat.pct(50)
	b.res.extra["resolve_cached_p99_us"] = 1000 * res.lat.pct(99)
	b.res.ratio("ratio_resolve_cached_db", "resolve_cached_per_s", "resolve_per_s")

	serial, err := closedLoop(ctx, b.progress, loadSpec{name: "B6cs", workers: 1, warmup: b.cfg.Warmup / 3, duration: measure}, resolve)
	if err != nil {
		return err
	}
	b.res.add(serial.row("B6cs", "Transactional check-back from the outcome cache, 1 worker", "resolve/s"))
	b.res.set("resolve_cached_serial_per_s", serial.perSecond())
	b.res.set("resolve_cached_serial_p99_ms", serial.lat.pct(99))
	b.res.extra["resolve_cached_serial_p50_us"] = 1000 * serial.lat.pct(50)
	b.res.extra["resolve_cached_serial_p99_us"] = 1000 * serial.lat.pct(99)
	b.res.ratio("ratio_resolve_cached_serial_db", "resolve_cached_serial_per_s", "resolve_serial_per_s")
	if n := wrong.Load(); n > 0 {
		return fmt.Errorf("%d cached check-backs got the wrong answer", n)
	}
	if st := tr.CheckBackCacheStats(); st.Misses != before.Misses {
		return fmt.Errorf("%d of B6c's check-backs missed the outcome cache and read the barrier", st.Misses-before.Misses)
	}
	return nil
}

// fillOutcomes runs ResolveCachedTx transactions through tr, half of them
// committed (the barrier row alone) and half rolled back, and returns
// their receipts. Not measured.
func (b *bench) fillOutcomes(ctx context.Context, tr *txrmq.Transactional, topic string) ([]*txmsg.Receipt, error) {
	n := b.cfg.ResolveCachedTx
	receipts := make([]*txmsg.Receipt, n)
	errRollBack := errors.New("rolled back on purpose")
	commit := func(context.Context, *gorm.DB) error { return nil }
	rollBack := func(context.Context, *gorm.DB) error { return errRollBack }
	t0 := time.Now()
	g := newGroup(ctx)
	var next atomic.Int64
	for range b.cfg.Workers {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				local, want := commit, txmsg.StateCommitted
				if i%2 == 1 {
					local, want = rollBack, txmsg.StateRolledBack
				}
				r, err := tr.Transact(g.ctx, &txmsg.Message{Topic: topic, Body: []byte(`{}`)}, local)
				if err != nil && !errors.Is(err, errRollBack) {
					return fmt.Errorf("fill outcomes: %w", err)
				}
				if r == nil || r.State != want {
					return fmt.Errorf("fill outcomes: transaction %d ended %v, want %s", i, r, want)
				}
				receipts[i] = r
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	b.progress.printf("B6c  ran %d transactions (half rolled back) in %s", n, time.Since(t0).Round(time.Millisecond))
	return receipts, nil
}

// fillBarrier writes ResolveRows committed and ResolveRows rolled-back
// barrier rows with multi-row INSERTs and returns their IDs.
func (b *bench) fillBarrier(ctx context.Context, table string) (committed, rolledBack []string, err error) {
	db, err := openPool(b.env.fillDSN, b.cfg.FillWorkers+2)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	}()
	n := b.cfg.ResolveRows
	committed, rolledBack = make([]string, n), make([]string, n)
	rows := make([]checker.Barrier, 0, 2*n)
	now := time.Now().UTC()
	for i := range n {
		committed[i], rolledBack[i] = txmsg.NewID(), txmsg.NewID()
		rows = append(rows,
			checker.Barrier{TxID: committed[i], State: checker.StateCommitted, CreatedAt: now},
			checker.Barrier{TxID: rolledBack[i], State: checker.StateRolledBack, CreatedAt: now})
	}
	t0 := time.Now()
	g := newGroup(ctx)
	var next atomic.Int64
	for range b.cfg.FillWorkers {
		g.Go(func() error {
			for {
				start := int(next.Add(fillChunk) - fillChunk)
				if start >= len(rows) {
					return nil
				}
				chunk := rows[start:min(start+fillChunk, len(rows))]
				if err := db.WithContext(g.ctx).Table(table).Create(&chunk).Error; err != nil {
					return fmt.Errorf("fill %s: %w", table, err)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	b.progress.printf("B6   filled %d barrier rows in %s", len(rows), time.Since(t0).Round(time.Millisecond))
	return committed, rolledBack, nil
}

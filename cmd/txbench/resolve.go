package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

// runB6: checker.Resolve answering check-backs. The barrier table is
// pre-filled with ResolveRows committed and ResolveRows rolled-back rows;
// the check-backs ask, in equal parts, for a committed ID, a rolled-back
// ID and an ID the barrier has never seen (which Resolve records as rolled
// back: an insert and a commit).
//
// rocketmq-client-go answers check-backs from one goroutine, one at a time,
// so the phase also measures one worker alone: the rate a single producer
// process can answer.
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
	resolve := func(ctx context.Context, seq int64) error {
		var id string
		want := txmsg.StateRolledBack
		switch seq % 3 {
		case 0:
			id, want = committed[rand.N(len(committed))], txmsg.StateCommitted
		case 1:
			id = rolledBack[rand.N(len(rolledBack))]
		default:
			id = txmsg.NewID()
		}
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
	spec := loadSpec{name: "B6", workers: b.cfg.Workers, warmup: b.cfg.Warmup, duration: b.cfg.ResolveFor}
	res, err := closedLoop(ctx, b.progress, spec, resolve)
	if err != nil {
		return err
	}
	x := row{
		Phase: "B6", What: fmt.Sprintf("checker.Resolve, %d workers, 1/3 each committed/rolled back/unknown", b.cfg.Workers),
		Rate: res.perSecond(), Unit: "resolve/s", P50: res.lat.pct(50), P99: res.lat.pct(99),
		Ops: res.ops, Errors: res.errs, Secs: res.elapsed.Seconds(), CPU: res.cpu,
	}
	if res.firstEr != nil {
		x.Note = "first error: " + res.firstEr.Error()
	}
	b.res.add(x)
	b.res.set("resolve_per_s", x.Rate)
	b.res.set("resolve_p99_ms", x.P99)

	serialSpec := loadSpec{name: "B6s", workers: 1, warmup: b.cfg.Warmup / 3, duration: b.cfg.ResolveFor / 2}
	serial, err := closedLoop(ctx, b.progress, serialSpec, resolve)
	if err != nil {
		return err
	}
	b.res.add(row{
		Phase: "B6s", What: "checker.Resolve, 1 worker (the client's check-back goroutine)",
		Rate: serial.perSecond(), Unit: "resolve/s", P50: serial.lat.pct(50), P99: serial.lat.pct(99),
		Ops: serial.ops, Errors: serial.errs, Secs: serial.elapsed.Seconds(), CPU: serial.cpu,
	})
	b.res.set("resolve_serial_per_s", serial.perSecond())
	b.res.extra["resolve_serial_p99_ms"] = serial.lat.pct(99)
	if n := wrong.Load(); n > 0 {
		return fmt.Errorf("%d check-backs got the wrong answer", n)
	}
	return nil
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

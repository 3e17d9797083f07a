package main

import (
	"context"
	"fmt"
	"time"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

func cmdPurge(ctx context.Context, e *env, args []string) error {
	fs, c := newFlags(e, "purge", "purge [flags]")
	sent := fs.Duration("sent-older-than", 24*time.Hour, "delete sent outbox rows published longer ago than this; negative skips")
	barrier := fs.Duration("barrier-older-than", 24*time.Hour, "delete barrier rows older than this (at least -check-window); negative skips")
	window := fs.Duration("check-window", checker.DefaultCheckWindow, "the broker's whole check-back window; barrier rows younger than this are never deleted")
	inbox := fs.Duration("inbox-older-than", 72*time.Hour, fmt.Sprintf("delete inbox rows handled longer ago than this (at least %s, the broker's redelivery horizon); negative skips", txmsg.MinInboxPurgeAge))
	parkedRows := new(time.Duration)
	fs.DurationVar(parkedRows, "parked-rows-older-than", -1, "also delete parked outbox rows parked longer ago than this; negative (the default) skips")
	fs.DurationVar(parkedRows, "dead-older-than", -1, "the name of -parked-rows-older-than in earlier releases")
	parked := new(time.Duration)
	fs.DurationVar(parked, "parked-messages-older-than", -1, "also delete messages consumers parked longer ago than this; negative (the default) skips")
	fs.DurationVar(parked, "dead-letters-older-than", -1, "the name of -parked-messages-older-than in earlier releases")
	failing := fs.Duration("failing-older-than", 24*time.Hour, "delete records of failing messages whose last failure is older than this (messages the broker dead-lettered leave theirs); negative skips")
	batch := fs.Int("batch", txmsg.DefaultPurgeBatch, "rows deleted per statement")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("purge takes no arguments, got %q", pos)
	}
	if *inbox >= 0 && *inbox < txmsg.MinInboxPurgeAge {
		return usageError("-inbox-older-than %s is inside the broker's redelivery horizon; use at least %s", *inbox, txmsg.MinInboxPurgeAge)
	}
	if *window <= 0 || *batch <= 0 {
		return usageError("-check-window and -batch must be positive")
	}
	if *barrier >= 0 && *barrier < *window {
		// Checked here too, so that nothing is purged before the refusal.
		return usageError("-barrier-older-than %s is inside the broker's check window (%s): %v", *barrier, *window, checker.ErrCutoffInWindow)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	k, err := c.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	chk, err := checker.New(k.db, checker.Config{Table: c.barrierTable, CheckWindow: *window, Logger: e.log})
	if err != nil {
		return usageError("%v", err)
	}
	inTable, parkedTable := k.inbox.Tables()
	steps := []struct {
		table, what string
		age         time.Duration
		purge       func(context.Context, time.Duration, int) (int64, error)
	}{
		{k.ob.Table(), "sent outbox rows", *sent, k.ob.Purge},
		{k.ob.Table(), "parked outbox rows", *parkedRows, k.ob.PurgeParked},
		{chk.Table(), "barrier rows", *barrier, chk.Purge},
		{inTable, "inbox rows", *inbox, k.inbox.Purge},
		{parkedTable, "parked messages", *parked, func(ctx context.Context, age time.Duration, batch int) (int64, error) {
			return k.inbox.PurgeParked(ctx, age, batch, "")
		}},
		{k.inbox.FailingTable(), "failing messages", *failing, func(ctx context.Context, age time.Duration, batch int) (int64, error) {
			return k.inbox.PurgeFailing(ctx, age, batch, "")
		}},
	}
	for _, s := range steps {
		if s.age < 0 {
			continue
		}
		if !k.has(ctx, s.table) {
			fmt.Fprintf(e.stdout, "%-16s %s: table not found, skipped\n", s.what, s.table)
			continue
		}
		n, err := s.purge(ctx, s.age, *batch)
		if err != nil {
			return fmt.Errorf("purge %s from %s (%d deleted before the error): %w", s.what, s.table, n, err)
		}
		fmt.Fprintf(e.stdout, "%-16s %s: deleted %d older than %s\n", s.what, s.table, n, s.age)
	}
	return nil
}

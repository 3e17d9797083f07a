package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/txmsg/txmsg/adapters/txrmq"
)

func cmdReconcile(ctx context.Context, e *env, args []string) error {
	fs, c := newFlags(e, "reconcile", "reconcile -since D [-until D] [-mode transactional|outbox] [-namesrv HOST:PORT] [-dry-run]")
	since := fs.Duration("since", 10*time.Minute, "check the events committed since this long ago")
	until := fs.Duration("until", 0, "and until this long ago (0: now)")
	mode := fs.String("mode", "", "the events to check: transactional (committed barrier rows that keep their message), outbox (sent outbox rows); default both tables that exist")
	dry := fs.Bool("dry-run", false, "report the events the brokers miss; publish nothing")
	concurrency := fs.Int("concurrency", txrmq.DefaultReconcileConcurrency, "lookups by key at once")
	pf := &publishFlags{}
	fs.StringVar(&pf.nameServers, "namesrv", "", "RocketMQ name servers, comma separated (default $TXMSG_NAMESRV)")
	fs.StringVar(&pf.group, "producer-group", "txmsgctl", "producer group to publish the missing events with")
	fs.StringVar(&pf.namespace, "namespace", "", "RocketMQ namespace")
	fs.StringVar(&pf.accessKey, "access-key", "", "ACL access key for publishing (default $TXMSG_ACCESS_KEY)")
	fs.StringVar(&pf.secretKey, "secret-key", "", "ACL secret key (default $TXMSG_SECRET_KEY; prefer it: flags show in ps)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("reconcile takes no arguments, got %q", pos)
	}
	if *since <= 0 || *until < 0 || *until >= *since {
		return usageError("-since must be positive and longer ago than -until")
	}
	if *mode != "" && *mode != "transactional" && *mode != "outbox" {
		return usageError("-mode %q: want transactional or outbox", *mode)
	}
	if *concurrency <= 0 {
		return usageError("-concurrency must be positive")
	}
	if pf.nameServers == "" {
		pf.nameServers = e.getenv("TXMSG_NAMESRV")
	}
	if pf.accessKey == "" {
		pf.accessKey = e.getenv("TXMSG_ACCESS_KEY")
	}
	if pf.secretKey == "" {
		pf.secretKey = e.getenv("TXMSG_SECRET_KEY")
	}
	e.addSecret(pf.secretKey)
	e.addSecret(pf.accessKey)
	if pf.nameServers == "" {
		return usageError("reconcile asks the brokers: pass -namesrv or set TXMSG_NAMESRV")
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	k, err := c.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()

	type source struct {
		what, table string
		src         txrmq.CommittedSource
	}
	var sources []source
	if *mode != "outbox" && k.has(ctx, k.chk.Table()) {
		sources = append(sources, source{"barrier", k.chk.Table(), k.chk})
	}
	if *mode != "transactional" && k.has(ctx, k.ob.Table()) {
		sources = append(sources, source{"outbox", k.ob.Table(), k.ob})
	}
	if len(sources) == 0 {
		return fmt.Errorf("no %s table in %s: nothing to reconcile", strings.Join([]string{k.chk.Table(), k.ob.Table()}, " or "), k.display)
	}
	quietClientLogs(e)
	var pub *txrmq.Publisher
	if !*dry {
		pub, err = txrmq.NewPublisher(pf.config(e, nil))
		if err != nil {
			return usageError("%v", err)
		}
		if err := pub.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()
	}
	pcfg := pf.config(e, nil)
	var failed []string
	for _, s := range sources {
		rcfg := txrmq.ReconcilerConfig{Conn: pcfg.Conn, Name: "txmsgctl", Concurrency: *concurrency, DryRun: *dry}
		var rec *txrmq.Reconciler
		if pub != nil {
			rec, err = txrmq.NewReconciler(s.src, pub, rcfg)
		} else {
			rec, err = txrmq.NewReconciler(s.src, nil, rcfg)
		}
		if err != nil {
			return usageError("%v", err)
		}
		now, err := s.src.Now(ctx)
		if err != nil {
			return err
		}
		res, err := rec.Reconcile(ctx, now.Add(-*since), now.Add(-*until))
		fmt.Fprintf(e.stdout, "%-8s %s: checked %d, missing %d, republished %d", s.what, s.table, res.Checked, len(res.Missing), res.Republished)
		if res.Unkept > 0 {
			fmt.Fprintf(e.stdout, ", %d committed without a kept message (checker.Config.KeepMessages off)", res.Unkept)
		}
		fmt.Fprintln(e.stdout)
		for _, id := range res.Missing {
			fmt.Fprintf(e.stdout, "  missing %s\n", id)
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", s.what, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("reconcile: %s", strings.Join(failed, "; "))
	}
	return nil
}

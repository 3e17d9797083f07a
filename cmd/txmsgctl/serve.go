package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/dashboard"
)

// cmdServe runs the web dashboard until ctx ends (SIGINT or SIGTERM).
func cmdServe(ctx context.Context, e *env, args []string) error {
	fs, c := newFlags(e, "serve", "serve [flags]")
	addr := fs.String("addr", "127.0.0.1:8089", "listen address; anything but loopback needs a token")
	allow := fs.Bool("allow-actions", false, "allow requeue, purge and replay (needs a token)")
	hosts := fs.String("allowed-hosts", "", "host names the dashboard is opened by, besides localhost, 127.0.0.1 and [::1], comma separated (dash.example.com or dash.example.com:8089); requests naming any other host are refused (always without a token; with a token once this is set)")
	token := fs.String("token", "", "token operators log in with (default $TXMSG_DASHBOARD_TOKEN; prefer it: flags show in ps)")
	namesrv := fs.String("namesrv", "", "RocketMQ name servers, comma separated (default $TXMSG_NAMESRV): the broker page, lookups on the broker, and replay")
	topics := fs.String("topics", "", "topics the broker page reports consumer lag for, comma separated, besides those in the inbox")
	group := fs.String("producer-group", "txmsgctl", "producer group replays publish with")
	interval := fs.Duration("sample-interval", 15*time.Second, "how often the overview's charts sample the fleet's rates and the tables' depths into the history table")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("serve takes no arguments, got %q", pos)
	}
	if *token == "" {
		*token = e.getenv("TXMSG_DASHBOARD_TOKEN")
	}
	e.addSecret(*token)
	if *namesrv == "" {
		*namesrv = e.getenv("TXMSG_NAMESRV")
	}
	if *allow && *token == "" {
		return usageError("-allow-actions needs a token: set TXMSG_DASHBOARD_TOKEN or pass -token")
	}
	if err := dashboard.CheckListen(*addr, *token); err != nil {
		return usageError("%v", err)
	}
	if *interval <= 0 {
		return usageError("-sample-interval must be positive")
	}
	k, err := c.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	cfg := dashboard.Config{
		Outbox: k.ob, Inbox: k.inbox, Checker: k.chk, Database: k.display,
		AllowActions: *allow, Token: *token, SampleInterval: *interval, Logger: e.log,
		InstancesTable: c.instancesTable, HistoryTable: c.historyTable,
		Topics: splitList(*topics), AllowedHosts: splitList(*hosts),
	}
	// Actions are logged at info level whatever -v says.
	cfg.Logger = slog.New(slog.NewTextHandler(scrubWriter{e}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if ns := splitList(*namesrv); len(ns) > 0 {
		cfg.NameServers = ns
		pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{
			NameServers: ns, Logger: e.log,
			AccessKey: e.getenv("TXMSG_ACCESS_KEY"), SecretKey: e.getenv("TXMSG_SECRET_KEY"),
		}, Group: *group})
		if err != nil {
			return usageError("%v", err)
		}
		e.addSecret(e.getenv("TXMSG_SECRET_KEY"))
		if err := pub.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()
		cfg.Publisher = pub
		cfg.Health = append(cfg.Health, dashboard.HealthCheck{Name: "name servers " + strings.Join(ns, ","), Check: func(ctx context.Context) error {
			return dialAny(ctx, ns)
		}})
	}
	cfg.Health = append(cfg.Health, dashboard.HealthCheck{Name: "database", Check: func(ctx context.Context) error {
		sqlDB, err := k.db.DB()
		if err != nil {
			return err
		}
		return sqlDB.PingContext(ctx)
	}})
	d, err := dashboard.New(k.db, cfg)
	if err != nil {
		return usageError("%v", err)
	}
	defer d.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	mode := "read-only"
	if *allow {
		mode = "actions allowed"
	}
	fmt.Fprintf(e.stdout, "txmsgctl: dashboard of %s on http://%s/ (%s)\n", k.display, ln.Addr(), mode)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
}

// dialAny checks that one of addrs accepts a TCP connection.
func dialAny(ctx context.Context, addrs []string) error {
	var d net.Dialer
	var errs []error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, "tcp", a)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

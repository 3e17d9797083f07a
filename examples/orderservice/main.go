// Command orderservice is a small order and inventory service built on
// txmsg. Placing an order writes the orders row and publishes OrderCreated
// in one atomic step; the inventory consumer takes the stock exactly once
// per order and confirms or rejects it.
//
// The delivery mode is chosen at startup (-mode=transactional|outbox) by
// wiring a different txmsg.Transactor; see providers.go and wire.go.
//
//	go run ./examples/orderservice -h
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg, err := ParseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orderservice:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, stop, cfg, log); err != nil {
		log.Error("orderservice failed", "err", err)
		os.Exit(1)
	}
}

// run starts the service and serves until ctx ends (a signal) or the HTTP
// server fails, then shuts down within cfg.ShutdownTimeout. stopSignals is
// called once shutdown begins, so a second signal kills the process.
func run(ctx context.Context, stopSignals func(), cfg Config, log *slog.Logger) error {
	app, cleanup, err := newApp(cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	log.Info("starting orderservice", "config", cfg)
	runErr := app.Start(ctx)
	if runErr == nil {
		log.Info("orderservice ready", "addr", app.Addr(), "mode", cfg.Mode)
		select {
		case <-ctx.Done():
			log.Info("shutting down")
		case runErr = <-app.Failed():
		}
	}
	stopSignals()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := app.Shutdown(sctx); err != nil {
		return errors.Join(runErr, fmt.Errorf("shutdown: %w", err))
	}
	if runErr == nil {
		log.Info("orderservice stopped")
	}
	return runErr
}

// newApp wires the service for cfg.Mode.
func newApp(cfg Config, log *slog.Logger) (*App, func(), error) {
	switch cfg.Mode {
	case ModeTransactional:
		return newTransactionalApp(cfg, log)
	case ModeOutbox:
		return newOutboxApp(cfg, log)
	default:
		return nil, nil, fmt.Errorf("unknown mode %q", cfg.Mode)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
)

// App is the running service: its tables, its event machinery (the mode's
// stack), the inventory consumer and the HTTP server.
type App struct {
	cfg       Config
	log       *slog.Logger
	db        *gorm.DB
	inbox     *txmsg.Inbox
	inventory *Inventory
	mode      *stack.Stack
	consumer  *txrmq.Consumer
	api       *API
	metrics   *Metrics

	server   *http.Server
	addr     net.Addr
	serveErr chan error

	// dash is txmsg's dashboard, read-only, under /dashboard/.
	dash *opsDashboard
}

// NewApp assembles the service; Start runs it.
func NewApp(cfg Config, log *slog.Logger, db *gorm.DB, inbox *txmsg.Inbox, inventory *Inventory, mode *stack.Stack, consumer *txrmq.Consumer, api *API, metrics *Metrics) *App {
	return &App{cfg: cfg, log: log, db: db, inbox: inbox, inventory: inventory, mode: mode, consumer: consumer, api: api, metrics: metrics,
		serveErr: make(chan error, 1)}
}

// Start creates the tables, seeds the inventory, starts the mode and the
// consumer and begins serving HTTP. When it fails, call Shutdown to stop
// what did start.
func (a *App) Start(ctx context.Context) error {
	if err := a.migrate(ctx); err != nil {
		return err
	}
	if a.cfg.Seed {
		if err := a.inventory.Seed(ctx); err != nil {
			return err
		}
	}
	if a.cfg.CreateTopicOn != "" {
		if err := ensureTopic(ctx, a.cfg); err != nil {
			return err
		}
	}
	if err := a.mode.Start(ctx); err != nil {
		return fmt.Errorf("start %s mode: %w", a.mode.Mode(), err)
	}
	if err := a.consumer.Start(ctx); err != nil {
		return fmt.Errorf("start inventory consumer: %w", err)
	}
	dash, err := a.newDashboard()
	if err != nil {
		return err
	}
	a.dash = dash
	ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	a.addr = ln.Addr()
	a.server = &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := a.server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			a.serveErr <- fmt.Errorf("http server: %w", err)
		}
	}()
	return nil
}

// migrate creates the business tables and txmsg's: the inbox and
// parked tables, and the mode's barrier or outbox table.
func (a *App) migrate(ctx context.Context) error {
	if err := a.db.WithContext(ctx).AutoMigrate(&Order{}, &StockItem{}, &Deduction{}); err != nil {
		return fmt.Errorf("migrate business tables: %w", err)
	}
	if err := a.inbox.Migrate(ctx); err != nil {
		return err
	}
	return a.mode.Migrate(ctx)
}

// Handler serves the API, GET /healthz, GET /metrics and, once started,
// txmsg's read-only dashboard under /dashboard/ (loopback clients only: it
// has no token).
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	if a.dash != nil {
		mux.Handle("/dashboard/", http.StripPrefix("/dashboard", a.dash))
	}
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /metrics", a.serveMetrics)
	mux.Handle("/", a.api)
	return mux
}

// healthTimeout bounds one /healthz or /metrics request's checks.
const healthTimeout = 3 * time.Second

// healthz answers 200 {"status":"ok",...} when the mode's stack and the
// consumer are healthy (see stack.Stack.Health and txrmq.Consumer.Health),
// else 503 with each check's error.
func (a *App) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	checks := []struct {
		name  string
		check func(context.Context) error
	}{{a.mode.Mode(), a.mode.Health}, {"consumer", a.consumer.Health}}
	status, body := http.StatusOK, map[string]any{"status": "ok"}
	results := map[string]string{}
	for _, c := range checks {
		if err := c.check(ctx); err != nil {
			status, body["status"] = http.StatusServiceUnavailable, "unhealthy"
			results[c.name] = err.Error()
			a.log.Warn("health check failed", "check", c.name, "err", err)
			continue
		}
		results[c.name] = "ok"
	}
	body["checks"] = results
	writeJSON(w, status, body)
}

// serveMetrics writes the hooks' counters and the mode's gauges in
// Prometheus's text format.
func (a *App) serveMetrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	gauges, err := outboxGauges(ctx, a.mode.Outbox())
	if err != nil {
		a.log.Warn("metrics: reading the mode's gauges failed", "err", err)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	a.metrics.WriteTo(w, gauges)
}

// Addr is the HTTP server's address once Start has returned.
func (a *App) Addr() string {
	if a.addr == nil {
		return ""
	}
	return a.addr.String()
}

// Failed delivers the HTTP server's error if it stops by itself.
func (a *App) Failed() <-chan error { return a.serveErr }

// Shutdown stops taking requests and lets those under way finish, then
// stops the mode's producers and relay, then the consumer (its running
// handlers commit or roll back first). Everything unfinished when ctx
// ends is abandoned safely: the database and the broker keep it for the
// next start.
func (a *App) Shutdown(ctx context.Context) error {
	var errs []error
	if a.server != nil {
		if err := a.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http server: %w", err))
		}
	}
	if a.dash != nil {
		_ = a.dash.Close()
	}
	if err := a.mode.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("%s mode: %w", a.mode.Mode(), err))
	}
	if err := a.consumer.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("inventory consumer: %w", err))
	}
	return errors.Join(errs...)
}

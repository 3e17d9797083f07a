// Package dashboard is a web UI for txmsg's tables, served by an
// [http.Handler] that a service mounts under a path of its own or that
// `txmsgctl serve` runs alone.
//
// Pages: an overview (outbox depth and age, relays' bucket leases, barrier
// rows, inbox and parked counts per consumer group, the health of the
// components given in [Config.Health], every instance of the fleet, and
// charts of the last hour and day), the outbox's parked and pending rows,
// failing consumers (the handler failures the inbox recorded and, with
// name servers, each group's %RETRY% and %DLQ% topics on the broker), the
// messages consumers parked, a lookup
// of one transaction by txmsg ID or message key, and, with name servers
// configured, consumer lag per topic on the broker and whether each
// consumer group is online.
//
// The dashboard is read-only unless [Config.AllowActions] is set, which
// needs a [Config.Token]. With a token every page asks for it (an
// Authorization: Bearer header, or a login form that sets a cookie);
// without one the handler answers loopback clients only, and only
// requests whose Host header names loopback or one of
// [Config.AllowedHosts] (a page of another site reaching it through DNS
// rebinding names its own host). Every action
// (requeue, purge, replay, resend) is a POST carrying a CSRF token and is logged
// with who did it.
//
//	d, err := dashboard.New(db, dashboard.Config{Outbox: ob, Inbox: inbox, Checker: chk})
//	if err != nil { ... }
//	defer d.Close()
//	mux.Handle("/txmsg/", http.StripPrefix("/txmsg", d))
//
// All its assets are embedded; it works offline.
package dashboard

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/dashboard/internal/rmqadmin"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
)

// HealthCheck is one component whose health the overview shows: Check
// returns nil when healthy (for example txrmq.Consumer.Health,
// outbox.Relay.Health or txrmq.Transactional.Health).
type HealthCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// Config configures a [Dashboard].
type Config struct {
	// Outbox, Inbox and Checker name the tables; nil means the default
	// table names over the database given to [New].
	Outbox  *outbox.Outbox
	Inbox   *txmsg.Inbox
	Checker *checker.Checker
	// Health are the components whose health the overview shows.
	Health []HealthCheck
	// Publisher replays parked messages and resends dead-lettered ones
	// (usually a txrmq.Publisher; resend needs a txmsg.GroupPublisher and
	// NameServers). Nil turns replay and resend off.
	Publisher txmsg.Publisher
	// NameServers, when set, turn on the broker page and the broker's
	// messages in transaction lookups. The broker requests carry no ACL
	// credentials.
	NameServers []string
	// Topics are the topics the broker page reports consumer lag for and
	// that lookups by key search, besides those found in the tables.
	Topics []string

	// AllowActions turns on requeue, purge and replay. It needs Token.
	AllowActions bool
	// Token, when set, is required for every page: as "Authorization:
	// Bearer <token>" or through the login form. Without a token the
	// dashboard answers loopback clients only, and only requests whose
	// Host is a loopback name or one of AllowedHosts.
	Token string
	// AllowedHosts are the host names, besides localhost, 127.0.0.0/8 and
	// [::1], that requests may name in their Host header: the name the
	// dashboard is opened by in a browser, as "dash.example.com" (any
	// port) or "dash.example.com:8089" (that port only). The check stops
	// a page of another site from reading the dashboard through a name
	// that resolves to this machine (DNS rebinding). Without a Token it
	// always applies; with a Token it applies when AllowedHosts is set.
	AllowedHosts []string

	// Title is shown in every page's header. Default "txmsg".
	Title string
	// Database labels the database in the header. Default: DB's DSN with
	// its password masked.
	Database string
	// SampleInterval is how often the dashboard samples the fleet's rates
	// (from the instance table's counters) and the outbox's and the
	// barrier's depths into the history table, for the overview's charts
	// of the last hour and the last day. Of several dashboards on one
	// database, only the one holding the history's lease samples. Default
	// 15 s.
	SampleInterval time.Duration
	// HistoryTable is the history table (and, with "_lease" appended, its
	// lease table), which the dashboard creates when it is missing.
	// Default fleet.DefaultHistoryTable.
	HistoryTable string
	// HistoryRetention is how long samples are kept. Default 24 h.
	HistoryRetention time.Duration
	// InstancesTable is the instance table the overview's fleet card
	// reads (see package fleet). Default fleet.DefaultTable.
	InstancesTable string
	// QueryTimeout bounds the queries of one page. Default 10 s.
	QueryTimeout time.Duration
	// Logger receives the action log and errors; nil means slog.Default().
	Logger *slog.Logger
}

// Limits of what one request may ask for.
const (
	// MaxPageSize is the most rows a list page shows.
	MaxPageSize = 500
	// MaxSelection is the most rows one action acts on.
	MaxSelection = 500
	// maxQueryLen bounds an ID, key, topic or group in a query.
	maxQueryLen = 255
)

// Dashboard is the handler. Close stops its sampler.
type Dashboard struct {
	cfg     Config
	db      *gorm.DB
	log     *slog.Logger
	ob      *outbox.Outbox
	inbox   *txmsg.Inbox
	chk     *checker.Checker
	rmq     *rmqadmin.Client
	secret  []byte
	mux     *http.ServeMux
	history *history

	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New returns the dashboard over db, the database holding txmsg's
// tables: cfg goes through [Config.WithDefaults] and [Config.Validate]
// (errors wrap txmsg.ErrInvalidConfig and name the field), then New starts
// the sampler.
func New(db *gorm.DB, cfg Config) (*Dashboard, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: dashboard: db is nil", txmsg.ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.AllowedHosts, _ = allowedHosts(cfg.AllowedHosts) // checked by Validate
	if cfg.Database == "" {
		cfg.Database = describeDB(db)
	}
	var err error
	d := &Dashboard{cfg: cfg, db: db, log: cfg.Logger.With("component", "txmsg.dashboard"), ob: cfg.Outbox, inbox: cfg.Inbox, chk: cfg.Checker}
	if d.ob == nil {
		if d.ob, err = outbox.New(db, outbox.Config{Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	if d.inbox == nil {
		if d.inbox, err = txmsg.NewInbox(db, txmsg.InboxConfig{Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	if d.chk == nil {
		if d.chk, err = checker.New(db, checker.Config{Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	if len(cfg.NameServers) > 0 {
		d.rmq = &rmqadmin.Client{NameServers: cfg.NameServers}
	}
	d.secret = make([]byte, 32)
	if _, err := rand.Read(d.secret); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d.routes()
	ctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	d.history = newHistory(d)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.history.run(ctx)
	}()
	return d, nil
}

// WithDefaults returns c with its zero fields set to their defaults:
// SampleInterval 15 s, QueryTimeout 10 s, InstancesTable
// fleet.DefaultTable, HistoryTable fleet.DefaultHistoryTable,
// HistoryRetention 24 h, Title "txmsg", Logger
// slog.Default(). It checks nothing; see [Config.Validate].
func (c Config) WithDefaults() Config {
	if c.SampleInterval == 0 {
		c.SampleInterval = 15 * time.Second
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 10 * time.Second
	}
	if c.InstancesTable == "" {
		c.InstancesTable = fleet.DefaultTable
	}
	if c.HistoryTable == "" {
		c.HistoryTable = fleet.DefaultHistoryTable
	}
	if c.HistoryRetention == 0 {
		c.HistoryRetention = 24 * time.Hour
	}
	if c.Title == "" {
		c.Title = "txmsg"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks a config that went through [Config.WithDefaults]: a
// zero field that has a default is refused. Its errors wrap
// txmsg.ErrInvalidConfig and name the field.
func (c Config) Validate() error {
	if c.AllowActions && c.Token == "" {
		return fmt.Errorf("%w: dashboard: AllowActions needs a Token", txmsg.ErrInvalidConfig)
	}
	if _, err := allowedHosts(c.AllowedHosts); err != nil {
		return err
	}
	if c.SampleInterval <= 0 {
		return fmt.Errorf("%w: dashboard: SampleInterval %v must be positive", txmsg.ErrInvalidConfig, c.SampleInterval)
	}
	if c.QueryTimeout <= 0 {
		return fmt.Errorf("%w: dashboard: QueryTimeout %v must be positive", txmsg.ErrInvalidConfig, c.QueryTimeout)
	}
	if !store.ValidIdent(c.HistoryTable) || !store.ValidIdent(c.HistoryTable+fleet.HistoryLeaseSuffix) {
		return fmt.Errorf("%w: dashboard: HistoryTable %q must be a plain SQL identifier of at most %d characters", txmsg.ErrInvalidConfig, c.HistoryTable, 64-len(fleet.HistoryLeaseSuffix))
	}
	if c.HistoryRetention <= 0 {
		return fmt.Errorf("%w: dashboard: HistoryRetention %v must be positive", txmsg.ErrInvalidConfig, c.HistoryRetention)
	}
	if !store.ValidIdent(c.InstancesTable) {
		return fmt.Errorf("%w: dashboard: InstancesTable %q must be a plain SQL identifier", txmsg.ErrInvalidConfig, c.InstancesTable)
	}
	if c.Logger == nil {
		return fmt.Errorf("%w: dashboard: Logger is nil; call WithDefaults first", txmsg.ErrInvalidConfig)
	}
	return nil
}

// Close stops the sampler and gives its lease up. The handler keeps
// serving, with charts that move only while another dashboard samples.
func (d *Dashboard) Close() error {
	d.closeOnce.Do(func() {
		d.stop()
		d.wg.Wait()
	})
	return nil
}

func (d *Dashboard) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", d.page(d.overview))
	m.HandleFunc("GET /outbox", d.page(d.outboxList))
	m.HandleFunc("GET /outbox/row", d.page(d.outboxRow))
	m.HandleFunc("GET /outbox/row/body", d.outboxBody)
	m.HandleFunc("POST /outbox/requeue", d.action(d.outboxRequeue))
	m.HandleFunc("POST /outbox/purge", d.action(d.outboxPurge))
	m.HandleFunc("GET /consumers", d.page(d.consumerList))
	m.HandleFunc("GET /consumers/message", d.page(d.consumerMessage))
	m.HandleFunc("GET /consumers/message/body", d.parkedBody)
	m.HandleFunc("POST /consumers/replay", d.action(d.consumerReplay))
	m.HandleFunc("POST /consumers/purge", d.action(d.consumerPurge))
	m.HandleFunc("POST /consumers/resend", d.action(d.consumerResend))
	m.HandleFunc("POST /consumers/retry", d.action(d.consumerRetryNow))
	m.HandleFunc("GET /tx", d.page(d.transaction))
	m.HandleFunc("GET /broker", d.page(d.broker))
	m.HandleFunc("GET /login", d.loginForm)
	m.HandleFunc("POST /login", d.login)
	m.HandleFunc("POST /logout", d.logout)
	m.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, &httpError{status: http.StatusNotFound, title: "Not found", msg: fmt.Sprintf("There is no page %s here.", r.URL.Path)})
	})
	d.mux = m
}

// ServeHTTP implements http.Handler.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			d.log.Error("panic serving a dashboard request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			d.fail(w, r, &httpError{status: http.StatusInternalServerError, title: "Internal error", msg: "The dashboard failed to answer this request; its log has the details."})
		}
	}()
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	if d.cfg.Token == "" && !loopbackPeer(r) {
		d.fail(w, r, &httpError{status: http.StatusForbidden, title: "Forbidden", guest: true,
			msg: "This dashboard has no token, so it answers only clients on this machine. Give it a token to open it to others."})
		return
	}
	if (d.cfg.Token == "" || len(d.cfg.AllowedHosts) > 0) && !d.hostAllowed(r.Host) {
		d.fail(w, r, &httpError{status: http.StatusForbidden, title: "Forbidden", guest: true,
			msg: fmt.Sprintf("This dashboard answers requests for localhost, 127.0.0.1 and [::1]%s only, not for host %q: "+
				"a page of another site may be reaching it through a name that resolves to this machine. "+
				"If you opened it by that name, add it to the dashboard's AllowedHosts (txmsgctl serve -allowed-hosts).",
				d.hostList(), short(80, r.Host))})
		return
	}
	if d.cfg.Token != "" && !d.authenticated(r) && !publicPath(r.URL.Path) {
		if r.Method == http.MethodGet && acceptsHTML(r) {
			http.Redirect(w, r, basePath(r)+"/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="txmsg dashboard"`)
		d.fail(w, r, &httpError{status: http.StatusUnauthorized, title: "Unauthorized", msg: "This dashboard needs its token: log in, or send Authorization: Bearer <token>."})
		return
	}
	d.mux.ServeHTTP(w, r)
}

func publicPath(p string) bool {
	return p == "/login" || strings.HasPrefix(p, "/static/")
}

func acceptsHTML(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return a == "" || strings.Contains(a, "text/html") || strings.Contains(a, "*/*")
}

// loopbackPeer reports whether the request comes from this machine.
func loopbackPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// allowedHosts checks and lower-cases the configured host names.
func allowedHosts(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, h := range in {
		bad := h == "" || strings.ContainsAny(h, "/\\?#@ \t\r\n")
		if !bad && strings.HasPrefix(h, "[") {
			host, _ := splitHost(h)
			bad = net.ParseIP(host) == nil
		}
		if bad {
			return nil, fmt.Errorf("%w: dashboard: AllowedHosts entry %q is not a host name: give it as dash.example.com or dash.example.com:8089", txmsg.ErrInvalidConfig, h)
		}
		out = append(out, strings.ToLower(h))
	}
	return out, nil
}

// splitHost splits a Host header into its host (without brackets) and
// port ("" when there is none).
func splitHost(h string) (host, port string) {
	if host, port, err := net.SplitHostPort(h); err == nil {
		return host, port
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		return h[1 : len(h)-1], ""
	}
	return h, ""
}

// hostAllowed reports whether a request's Host names this machine's
// loopback (localhost, 127.0.0.0/8, [::1], any port) or one of
// AllowedHosts.
func (d *Dashboard) hostAllowed(h string) bool {
	h = strings.ToLower(h)
	host, _ := splitHost(h)
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range d.cfg.AllowedHosts {
		if a == h {
			return true
		}
		if ah, ap := splitHost(a); ap == "" && ah == host {
			return true
		}
	}
	return false
}

// hostList names AllowedHosts for the refusal page.
func (d *Dashboard) hostList() string {
	if len(d.cfg.AllowedHosts) == 0 {
		return ""
	}
	return " and " + strings.Join(d.cfg.AllowedHosts, ", ")
}

// CheckListen returns an error when addr (host:port) is not a loopback
// address and token is empty: a dashboard without a token must not be
// reachable from other machines. An empty host means every interface.
func CheckListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen address %q is not host:port: %w", addr, err)
	}
	if token != "" {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("dashboard: refusing to listen on %q without a token: bind to 127.0.0.1 or ::1, or set a token", addr)
}

// basePath is the path the handler is mounted under: what
// http.StripPrefix removed from the request's path.
func basePath(r *http.Request) string {
	orig := r.RequestURI
	if i := strings.IndexAny(orig, "?#"); i >= 0 {
		orig = orig[:i]
	}
	if strings.HasPrefix(orig, "http://") || strings.HasPrefix(orig, "https://") {
		if i := strings.Index(orig[8:], "/"); i >= 0 {
			orig = orig[8+i:]
		}
	}
	p := r.URL.EscapedPath()
	if p != "" && strings.HasSuffix(orig, p) {
		return strings.TrimSuffix(orig[:len(orig)-len(p)], "/")
	}
	return ""
}

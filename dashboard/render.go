package dashboard

import (
	"bytes"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/redact"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

func staticHandler() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	h := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

var funcs = template.FuncMap{
	"ago":      ago,
	"stamp":    stampTime,
	"short":    short,
	"join":     strings.Join,
	"dur":      func(d time.Duration) string { return roundDur(d) },
	"add":      func(a, b int) int { return a + b },
	"contains": strings.Contains,
	"list":     func(s ...string) []string { return s },
	"bodyline": bodyLine,
	"name":     breakName,
	"bytes":    byteSize,
}

// nameBreaks are the characters a long topic, group or relay name may
// wrap after.
const nameBreaks = "_-.:%/@"

// breakName escapes a topic, group or relay name and adds a <wbr> after
// each separator, so that a long name wraps between its words rather than
// inside one.
func breakName(s string) template.HTML {
	var b strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(nameBreaks, s[i]) >= 0 && i+1 < len(s) {
			b.WriteString(template.HTMLEscapeString(s[start : i+1]))
			b.WriteString("<wbr>")
			start = i + 1
		}
	}
	b.WriteString(template.HTMLEscapeString(s[start:]))
	return template.HTML(b.String())
}

// pages are parsed once: the layout plus each page's template.
var pages = func() map[string]*template.Template {
	names := []string{"overview", "outbox", "row", "consumers", "parked", "tx", "broker", "login", "error", "done"}
	out := map[string]*template.Template{}
	for _, n := range names {
		out[n] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+n+".html"))
	}
	return out
}()

// view is what the layout renders around a page's data.
type view struct {
	Title    string
	AppTitle string
	Database string
	Base     string
	Nav      string
	CSRF     string
	Auth     bool // a token protects the dashboard
	Actions  bool // requeue, purge and replay are allowed
	Broker   bool // the broker page exists
	Who      string
	Guest    bool // not logged in: no database, no navigation
	Flash    string
	Data     any
}

func (d *Dashboard) view(r *http.Request, nav, title string, data any) *view {
	v := &view{Title: title, AppTitle: d.cfg.Title, Database: d.cfg.Database, Base: basePath(r), Nav: nav,
		Auth: d.cfg.Token != "", Actions: d.cfg.AllowActions, Broker: d.rmq != nil, Data: data}
	if v.Auth && d.authenticated(r) {
		v.CSRF = d.csrfToken(r)
		v.Who, _ = d.session(r)
	}
	if v.Auth && !d.authenticated(r) {
		v.Guest, v.Database = true, ""
	}
	if f := r.URL.Query().Get("done"); f != "" {
		v.Flash = d.openFlash(f)
	}
	return v
}

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	d.renderView(w, status, page, d.view(r, page, title, data))
}

func (d *Dashboard) renderView(w http.ResponseWriter, status int, page string, v *view) {
	var buf bytes.Buffer
	if err := pages[page].Execute(&buf, v); err != nil {
		d.log.Error("dashboard template failed", "page", page, "err", err)
		http.Error(w, "The dashboard could not render this page; its log has the details.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// httpError is a page's failure: a status and a message for the operator.
type httpError struct {
	status int
	title  string
	msg    string
	// guest hides the database and the navigation: the request was
	// refused before anything else was looked at.
	guest bool
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, title: "Bad request", msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *httpError {
	return &httpError{status: http.StatusNotFound, title: "Not found", msg: fmt.Sprintf(format, args...)}
}

// fail renders err as a message page. Errors other than *httpError are
// the database's or the broker's: 503, with the error's text.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		d.log.Warn("dashboard request failed", "path", r.URL.Path, "err", err)
		he = &httpError{status: http.StatusServiceUnavailable, title: "Unavailable", msg: "The dashboard could not read what this page shows: " + err.Error()}
	}
	v := d.view(r, "", he.title, he)
	if d.cfg.Token != "" && !d.authenticated(r) {
		v.CSRF = ""
	}
	if he.guest {
		v.Guest, v.Database, v.CSRF, v.Who = true, "", "", ""
	}
	d.renderView(w, he.status, "error", v)
}

// page wraps a GET handler: fn returns the template, title and data, or
// an error shown as a message page.
func (d *Dashboard) page(fn func(r *http.Request) (string, string, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := contextWithTimeout(r, d.cfg.QueryTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		name, title, data, err := fn(r)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		d.render(w, r, http.StatusOK, name, title, data)
	}
}

// describeDB is the DSN behind db with its password masked, or its
// dialect's name.
func describeDB(db *gorm.DB) string {
	if dl, ok := db.Dialector.(*gmysql.Dialector); ok && dl.Config != nil && dl.Config.DSN != "" {
		if cfg, err := mysql.ParseDSN(dl.Config.DSN); err == nil {
			return redact.DSN(cfg)
		}
		return "mysql (DSN not shown)"
	}
	return db.Dialector.Name()
}

// body is a message body prepared for display.
type body struct {
	Kind string // "json", "text" or "hex"
	Text string
	Size int
	Cut  bool
}

// maxShownBody bounds how much of a body a page shows; the page links to
// a download of the whole body.
const maxShownBody = 64 << 10

// maxIndentedBody is the largest JSON body a page indents; a larger one is
// shown as text.
const maxIndentedBody = 1 << 20

func showBody(b []byte) body {
	out := body{Size: len(b)}
	if len(b) > 0 && len(b) <= maxIndentedBody && json.Valid(b) {
		var buf bytes.Buffer
		if json.Indent(&buf, b, "", "  ") == nil {
			out.Kind = "json"
			shown := cutAtRune(buf.Bytes(), maxShownBody)
			out.Text, out.Cut = string(shown), len(shown) < buf.Len()
			return out
		}
	}
	shown := cutAtRune(b, maxShownBody)
	out.Cut = len(shown) < len(b)
	if utf8.Valid(shown) && printable(string(shown)) {
		out.Kind, out.Text = "text", string(shown)
		return out
	}
	out.Kind, out.Text = "hex", hex.Dump(shown)
	return out
}

// cutAtRune returns at most the first n bytes of b, cut before a UTF-8
// rune that would not fit whole.
func cutAtRune(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	i := n
	for i > n-utf8.UTFMax && i > 0 && !utf8.RuneStart(b[i]) {
		i--
	}
	if !utf8.RuneStart(b[i]) {
		i = n // not UTF-8 text: cut at n
	}
	return b[:i]
}

// sendBody answers with body as a file to save, never to display.
func sendBody(w http.ResponseWriter, name string, body []byte) {
	safe := strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (r == '-' || r == '_' || r == '.' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return r
		}
		return '_'
	}, name)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": safe + ".body"}))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// properties parses a stored JSON object of properties for display.
func properties(s string) map[string]string {
	if s == "" || s == "{}" || s == "null" {
		return nil
	}
	var m map[string]string
	if json.Unmarshal([]byte(s), &m) != nil {
		return map[string]string{"(unreadable)": s}
	}
	return m
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	if d < 0 {
		return "in " + roundDur(-d)
	}
	return roundDur(d) + " ago"
}

func roundDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

func stampTime(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "-"
		}
		return v.UTC().Format("2006-01-02 15:04:05.000 UTC")
	case *time.Time:
		if v == nil {
			return "-"
		}
		return stampTime(*v)
	}
	return "-"
}

// short cuts s to its first line and at most n runes.
func short(n int, s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n-1]) + "…"
	}
	return s
}

// Title and Message are what the error page shows.
func (e *httpError) Title() string   { return e.title }
func (e *httpError) Message() string { return e.msg }

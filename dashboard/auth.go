package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// sessionCookie holds a logged-in operator's name and a MAC of it under
// the dashboard's secret, which is new at every start.
const sessionCookie = "txmsg_dashboard"

// maxNameLen bounds the operator name given at login.
const maxNameLen = 64

func (d *Dashboard) mac(parts ...string) string {
	m := hmac.New(sha256.New, d.secret)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// tokenOK compares a presented token with the configured one in constant
// time.
func (d *Dashboard) tokenOK(got string) bool {
	want := sha256.Sum256([]byte(d.cfg.Token))
	have := sha256.Sum256([]byte(got))
	return d.cfg.Token != "" && subtle.ConstantTimeCompare(want[:], have[:]) == 1
}

// who names the operator behind r: the login name, "token" for a bearer
// token, or "anonymous" without a token; and the peer address.
func (d *Dashboard) who(r *http.Request) string {
	name := "anonymous"
	if d.cfg.Token != "" {
		if n, ok := d.session(r); ok {
			name = n
		} else {
			name = "bearer-token"
		}
	}
	return name + "@" + r.RemoteAddr
}

// session returns the operator name of a valid session cookie.
func (d *Dashboard) session(r *http.Request) (string, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", false
	}
	enc, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	if !hmac.Equal([]byte(sig), []byte(d.mac("session", string(raw)))) {
		return "", false
	}
	return string(raw), true
}

// authenticated reports whether r carries the token or a session.
func (d *Dashboard) authenticated(r *http.Request) bool {
	if d.cfg.Token == "" {
		return true
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok && d.tokenOK(strings.TrimSpace(tok)) {
			return true
		}
	}
	_, ok := d.session(r)
	return ok
}

// csrfToken is the value every action form carries: a MAC of the
// operator's identity, so a page of another site can neither read nor
// forge it.
func (d *Dashboard) csrfToken(r *http.Request) string {
	name, _ := d.session(r)
	return d.mac("csrf", name)
}

// csrfOK checks an action's CSRF token and, when the browser sends them,
// its Origin and Sec-Fetch-Site headers.
func (d *Dashboard) csrfOK(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	got := r.PostFormValue("csrf")
	return got != "" && hmac.Equal([]byte(got), []byte(d.csrfToken(r)))
}

func (d *Dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	if d.cfg.Token == "" {
		http.Redirect(w, r, basePath(r)+"/", http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "login", "Log in", loginData{Next: safeNext(r.URL.Query().Get("next"))})
}

type loginData struct {
	Next  string
	Error string
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if d.cfg.Token == "" {
		http.Redirect(w, r, basePath(r)+"/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		d.fail(w, r, badRequest("The login form could not be read: %v", err))
		return
	}
	next := safeNext(r.PostFormValue("next"))
	name := strings.TrimSpace(r.PostFormValue("name"))
	if name == "" {
		name = "operator"
	}
	if len(name) > maxNameLen || !utf8.ValidString(name) || strings.ContainsAny(name, "\r\n\x00") {
		d.render(w, r, http.StatusBadRequest, "login", "Log in", loginData{Next: next, Error: "The name must be one line of at most 64 bytes."})
		return
	}
	if !d.tokenOK(r.PostFormValue("token")) {
		d.log.Warn("dashboard login refused: wrong token", "who", name+"@"+r.RemoteAddr)
		d.render(w, r, http.StatusUnauthorized, "login", "Log in", loginData{Next: next, Error: "Wrong token."})
		return
	}
	value := base64.RawURLEncoding.EncodeToString([]byte(name)) + "." + d.mac("session", name)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: basePath(r) + "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	d.log.Info("dashboard login", "who", name+"@"+r.RemoteAddr)
	http.Redirect(w, r, basePath(r)+next, http.StatusSeeOther)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil || !d.csrfOK(r) {
		d.fail(w, r, &httpError{status: http.StatusForbidden, title: "Forbidden", msg: "The logout form's CSRF token is missing or wrong. Reload the page and try again."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: basePath(r) + "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, basePath(r)+"/login", http.StatusSeeOther)
}

// safeNext keeps a post-login target on this dashboard. It comes from
// the request, so a link can carry anything; browsers drop tabs and
// newlines from a Location, read a backslash as a slash and send "//host"
// or "/.//host" to another site. Only a path as the dashboard builds one
// passes: it starts with one slash, is printable ASCII without a
// backslash or a fragment, parses with no scheme or host, and its
// decoded path has no control byte, backslash, empty segment ("//") or
// dot segment. Anything else becomes "/".
func safeNext(next string) string {
	const home = "/"
	if !strings.HasPrefix(next, "/") {
		return home
	}
	for i := 0; i < len(next); i++ {
		if c := next[i]; c <= ' ' || c >= 0x7f || c == '\\' || c == '#' {
			return home
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return home
	}
	for i := 0; i < len(u.Path); i++ {
		if c := u.Path[i]; c < ' ' || c >= 0x7f || c == '\\' {
			return home
		}
	}
	segs := strings.Split(u.Path[1:], "/")
	for i, s := range segs {
		if s == "." || s == ".." || (s == "" && i < len(segs)-1) {
			return home
		}
	}
	return next
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

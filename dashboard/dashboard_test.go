package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/dashboard"
	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// client is an HTTP client that does not follow redirects, so tests see
// them, and keeps cookies.
func client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 90 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

type response struct {
	status int
	body   string
	header http.Header
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values, hdr map[string]string) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{status: res.StatusCode, body: string(b), header: res.Header}
}

func get(t *testing.T, c *http.Client, u string) response { return do(t, c, "GET", u, nil, nil) }

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrfOf returns the CSRF token an action form of page carries.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, "no CSRF token on the page")
	return m[1]
}

// login logs c in with token through the form and returns the CSRF token
// of the overview.
func login(t *testing.T, b *dashtest.Bed, c *http.Client, token string) string {
	t.Helper()
	res := do(t, c, "POST", b.URL+"login", url.Values{"token": {token}, "name": {"alice"}, "next": {"/"}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	ov := get(t, c, b.URL)
	require.Equal(t, http.StatusOK, ov.status)
	return csrfOf(t, ov.body)
}

// TestPagesShowRealRows fills every table, then checks that each page
// shows the rows with their details, with links under the mount path.
func TestPagesShowRealRows(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{Health: []dashboard.HealthCheck{
		{Name: "always-ok", Check: func(context.Context) error { return nil }},
		{Name: "broken-part", Check: func(context.Context) error { return io.ErrUnexpectedEOF }},
	}})
	dead := b.ParkedRow("order-17", dashtest.Body(dashtest.Event{Order: "o-17", Qty: 3}), "send to topic: broker answered status 2")
	binDead := b.ParkedRow("order-18", []byte{0x00, 0xff, 0x10, 0x80}, "boom")
	pending := b.PendingRow("order-19", dashtest.Event{Order: "o-19", Qty: 1})
	b.Barrier(pending)
	b.Handled("billing", pending)
	parked := b.Parked("shipping", "order-20", []byte("not json {"), "invalid character 'o' in literal null")
	c := client(t)

	ov := get(t, c, b.URL)
	require.Equal(t, http.StatusOK, ov.status, ov.body)
	for _, want := range []string{`id="parked-count">2<`, `id="pending-count">1<`, "billing", "shipping", "always-ok", "broken-part", "unexpected EOF", "<svg", Mount("/static/app.css")} {
		require.Contains(t, ov.body, want)
	}

	list := get(t, c, b.URL+"outbox?status=parked")
	require.Equal(t, http.StatusOK, list.status)
	require.Contains(t, list.body, dead)
	require.Contains(t, list.body, binDead)
	require.NotContains(t, list.body, pending)
	require.Contains(t, list.body, "broker answered status 2")
	// Filters: by key, by topic, by age.
	byKey := get(t, c, b.URL+"outbox?status=parked&key=order-17")
	require.Contains(t, byKey.body, dead)
	require.NotContains(t, byKey.body, binDead)
	require.NotContains(t, get(t, c, b.URL+"outbox?status=parked&topic=other_topic").body, dead)
	require.NotContains(t, get(t, c, b.URL+"outbox?status=parked&older=1h").body, dead)
	require.Contains(t, get(t, c, b.URL+"outbox?status=parked&older=5m").body, dead)
	// Pagination: one row per page links to the next.
	p1 := get(t, c, b.URL+"outbox?status=parked&limit=1")
	require.Contains(t, p1.body, dead)
	require.NotContains(t, p1.body, binDead)
	require.Contains(t, p1.body, `id="next-page"`)

	row := get(t, c, b.URL+"outbox/row?id="+dead)
	require.Equal(t, http.StatusOK, row.status)
	require.Contains(t, row.body, "shown as json")
	require.Contains(t, row.body, "&#34;order&#34;: &#34;o-17&#34;") // indented JSON
	require.Contains(t, row.body, "abc-123")                         // headers
	bin := get(t, c, b.URL+"outbox/row?id="+binDead)
	require.Contains(t, bin.body, "shown as hex")
	require.Contains(t, bin.body, "00 ff 10 80")

	cons := get(t, c, b.URL+"consumers")
	require.Equal(t, http.StatusOK, cons.status)
	require.Contains(t, cons.body, parked)
	require.Contains(t, cons.body, "invalid character")
	msg := get(t, c, b.URL+"consumers/message?group=shipping&id="+parked)
	require.Equal(t, http.StatusOK, msg.status)
	require.Contains(t, msg.body, "not json {")
	require.Contains(t, msg.body, "def-456")

	tx := get(t, c, b.URL+"tx?q="+pending)
	require.Equal(t, http.StatusOK, tx.status)
	for _, want := range []string{`class="st committed"`, `class="st pending"`, "handled by <b>billing</b>"} {
		require.Contains(t, tx.body, want)
	}
	byKeyTx := get(t, c, b.URL+"tx?q=order-20")
	require.Contains(t, byKeyTx.body, parked)
	require.Contains(t, byKeyTx.body, "parked by shipping")

	// Without name servers there is no broker page.
	require.NotContains(t, ov.body, `href="/ops/broker"`)
	require.Equal(t, http.StatusNotFound, get(t, c, b.URL+"broker").status)
	// The chart has samples once the sampler ran.
	require.Eventually(t, func() bool {
		return strings.Contains(get(t, c, b.URL).body, `<path class="pending"`)
	}, 30*time.Second, 200*time.Millisecond)
}

// Mount is p under the test server's mount path.
func Mount(p string) string { return dashtest.Mount + p }

// TestReadOnlyByDefault: without AllowActions every action is refused and
// changes nothing; pages show no action buttons.
func TestReadOnlyByDefault(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{})
	dead := b.ParkedRow("k", []byte(`{}`), "x")
	parked := b.Parked("g1", "k", []byte("x"), "bad")
	c := client(t)
	page := get(t, c, b.URL+"outbox?status=parked")
	require.NotContains(t, page.body, `id="requeue"`)
	for _, path := range []string{"outbox/requeue", "outbox/purge"} {
		res := do(t, c, "POST", b.URL+path, url.Values{"id": {dead}}, nil)
		require.Equal(t, http.StatusForbidden, res.status, path)
		require.Contains(t, res.body, "read-only")
	}
	for _, path := range []string{"consumers/replay", "consumers/purge"} {
		res := do(t, c, "POST", b.URL+path, url.Values{"id": {parked}, "group": {"g1"}}, nil)
		require.Equal(t, http.StatusForbidden, res.status, path)
	}
	require.Equal(t, outbox.StatusParked, b.Status(dead))
	_, err := b.Inbox.ParkedMessage(context.Background(), "g1", parked)
	require.NoError(t, err)
	_, err = dashboard.New(b.DB, dashboard.Config{AllowActions: true})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "actions without a token")
}

// TestTokenGuardsEveryPage: with a token, pages need the bearer header or
// the login cookie; a wrong token is refused; the token never appears in
// a page.
func TestTokenGuardsEveryPage(t *testing.T) {
	t.Parallel()
	const token = "tok-9c2f1e7a5b3d"
	b := dashtest.New(t, dashtest.Options{Token: token})
	c := client(t)
	for _, path := range []string{"", "outbox", "consumers", "tx?q=x", "outbox/row?id=x", "outbox/row/body?id=x", "consumers/message/body?group=g&id=x"} {
		res := do(t, c, "GET", b.URL+path, nil, map[string]string{"Accept": "text/html"})
		require.Equal(t, http.StatusSeeOther, res.status, path)
		require.Contains(t, res.header.Get("Location"), Mount("/login?next="))
		api := do(t, c, "GET", b.URL+path, nil, map[string]string{"Accept": "application/json"})
		require.Equal(t, http.StatusUnauthorized, api.status, path)
	}
	require.Equal(t, http.StatusUnauthorized, do(t, c, "GET", b.URL, nil, map[string]string{"Accept": "application/json", "Authorization": "Bearer wrong"}).status)
	ok := do(t, c, "GET", b.URL+"outbox", nil, map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, http.StatusOK, ok.status)
	require.NotContains(t, ok.body, token)

	// Login form: it shows neither the database nor the pages; a wrong
	// token, then the right one.
	form := get(t, c, b.URL+"login")
	require.Equal(t, http.StatusOK, form.status)
	require.NotContains(t, form.body, "tcp(")
	require.NotContains(t, form.body, "<nav>")
	bad := do(t, c, "POST", b.URL+"login", url.Values{"token": {"nope"}, "next": {"/outbox"}}, nil)
	require.Equal(t, http.StatusUnauthorized, bad.status)
	require.Contains(t, bad.body, "Wrong token")
	good := do(t, c, "POST", b.URL+"login", url.Values{"token": {token}, "name": {"alice"}, "next": {"/outbox"}}, nil)
	require.Equal(t, http.StatusSeeOther, good.status)
	require.Equal(t, Mount("/outbox"), good.header.Get("Location"))
	page := get(t, c, b.URL+"outbox")
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "alice")
	require.NotContains(t, page.body, token)
	// An off-site next is ignored.
	c2 := client(t)
	off := do(t, c2, "POST", b.URL+"login", url.Values{"token": {token}, "next": {"//evil.example/x"}}, nil)
	require.Equal(t, Mount("/"), off.header.Get("Location"))
	// A forged cookie is refused.
	c3 := client(t)
	u, _ := url.Parse(b.URL)
	c3.Jar.SetCookies(u, []*http.Cookie{{Name: "txmsg_dashboard", Value: "YWxpY2U.0000"}})
	require.Equal(t, http.StatusUnauthorized, do(t, c3, "GET", b.URL, nil, map[string]string{"Accept": "application/json"}).status)
	// Logout needs the CSRF token, then ends the session.
	csrf := csrfOf(t, page.body)
	require.Equal(t, http.StatusForbidden, do(t, c, "POST", b.URL+"logout", url.Values{}, nil).status)
	require.Equal(t, http.StatusSeeOther, do(t, c, "POST", b.URL+"logout", url.Values{"csrf": {csrf}}, nil).status)
	require.Equal(t, http.StatusSeeOther, do(t, c, "GET", b.URL, nil, map[string]string{"Accept": "text/html"}).status)
}

// TestActionsNeedCSRFAndAreLogged: an action without the CSRF token, with
// a wrong one, or from another site is refused and changes nothing; with
// it, requeue and purge act on the selected parked rows only and the log
// says who did what.
func TestActionsNeedCSRFAndAreLogged(t *testing.T) {
	t.Parallel()
	const token = "tok-5e8a0c4d2f61"
	b := dashtest.New(t, dashtest.Options{Token: token, AllowActions: true})
	dead1 := b.ParkedRow("k1", []byte(`{"a":1}`), "x")
	dead2 := b.ParkedRow("k2", []byte(`{"a":2}`), "x")
	parked := b.Parked("g1", "k3", []byte("zz"), "bad")
	c := client(t)
	csrf := login(t, b, c, token)

	for name, tc := range map[string]struct {
		form url.Values
		hdr  map[string]string
	}{
		"no token":   {url.Values{"id": {dead1}}, nil},
		"wrong":      {url.Values{"id": {dead1}, "csrf": {strings.Repeat("0", 64)}}, nil},
		"cross-site": {url.Values{"id": {dead1}, "csrf": {csrf}}, map[string]string{"Origin": "http://evil.example"}},
		"fetch-site": {url.Values{"id": {dead1}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		res := do(t, c, "POST", b.URL+"outbox/requeue", tc.form, tc.hdr)
		require.Equal(t, http.StatusForbidden, res.status, name)
		require.Contains(t, res.body, "CSRF", name)
	}
	require.Equal(t, outbox.StatusParked, b.Status(dead1))
	// Bearer-token clients need the CSRF token too.
	bearer := do(t, client(t), "POST", b.URL+"outbox/requeue", url.Values{"id": {dead1}}, map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, http.StatusForbidden, bearer.status)

	res := do(t, c, "POST", b.URL+"outbox/requeue", url.Values{"id": {dead1}, "csrf": {csrf}, "back": {"/outbox?status=parked"}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, outbox.StatusPending, b.Status(dead1))
	require.Equal(t, outbox.StatusParked, b.Status(dead2))
	back := get(t, c, b.Server.URL+res.header.Get("Location"))
	require.Contains(t, back.body, "Requeued 1 of 1 selected row(s)")
	// A forged message in the link is not shown.
	forged := get(t, c, b.URL+"outbox?done=SGFja2Vk.0123456789abcdef0123456789abcdef")
	require.NotContains(t, forged.body, `id="flash"`)

	// Purge deletes parked rows only: the requeued (now pending) one stays.
	res = do(t, c, "POST", b.URL+"outbox/purge", url.Values{"id": {dead1, dead2}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, outbox.StatusPending, b.Status(dead1))
	require.Equal(t, outbox.Status(""), b.Status(dead2))

	res = do(t, c, "POST", b.URL+"consumers/purge", url.Values{"id": {parked}, "group": {"g1"}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	_, err := b.Inbox.ParkedMessage(context.Background(), "g1", parked)
	require.Error(t, err)
	// Replay without a publisher says so.
	res = do(t, c, "POST", b.URL+"consumers/replay", url.Values{"id": {parked}, "group": {"g1"}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusConflict, res.status)

	logs := b.Logs.String()
	for _, want := range []string{`"action":"outbox.requeue"`, `"action":"outbox.purge"`, `"action":"consumer.purge"`, `"who":"alice@127.0.0.1:`, dead1, dead2, parked} {
		require.Contains(t, logs, want)
	}
	require.Contains(t, logs, "bad CSRF token")
	require.NotContains(t, logs, token)
}

// TestBadInputGetsAClearMessage: malformed filters, oversized pages and
// selections, unknown IDs and paths get a 4xx page with a message, never
// a 500 or a stack trace.
func TestBadInputGetsAClearMessage(t *testing.T) {
	t.Parallel()
	const token = "tok-3b7d9f1a0c55"
	b := dashtest.New(t, dashtest.Options{Token: token, AllowActions: true})
	c := client(t)
	csrf := login(t, b, c, token)
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"outbox?limit=100000", 400, "between 1 and 500"},
		{"outbox?limit=-3", 400, "between 1 and 500"},
		{"outbox?limit=ten", 400, "not a number"},
		{"outbox?older=yesterday", 400, "not an age"},
		{"outbox?older=-5m", 400, "not an age"},
		{"outbox?status=lost", 400, "not parked, pending, sent or all"},
		{"outbox?after=abc", 400, "not a row number"},
		{"outbox?topic=" + long, 400, "at most 255 bytes"},
		{"outbox/row?id=no-such-id", 404, "No outbox row has txmsg ID"},
		{"outbox/row", 400, "Give the row"},
		{"consumers?limit=501", 400, "between 1 and 500"},
		{"consumers/message?group=g&id=nope", 404, "has no parked message"},
		{"consumers/message?id=nope", 400, "Give the consumer group"},
		{"tx?q=" + long, 400, "at most 255 bytes"},
		{"no/such/page", 404, "There is no page"},
	} {
		res := get(t, c, b.URL+tc.path)
		require.Equal(t, tc.status, res.status, tc.path)
		require.Contains(t, res.body, tc.want, tc.path)
		require.NotContains(t, res.body, "goroutine", tc.path)
		require.NotContains(t, res.body, ".go:", tc.path)
	}
	many := url.Values{"csrf": {csrf}}
	for i := 0; i < dashboard.MaxSelection+1; i++ {
		many.Add("id", "id-"+strings.Repeat("0", 3)+string(rune('a'+i%26))+strings.Repeat("1", i%7)+"-"+itoa(i))
	}
	for _, tc := range []struct {
		path string
		form url.Values
		want string
	}{
		{"outbox/requeue", url.Values{"csrf": {csrf}}, "Nothing was selected"},
		{"outbox/purge", many, "At most 500 rows"},
		{"outbox/requeue", url.Values{"csrf": {csrf}, "id": {long}}, "at most 255 bytes"},
		{"consumers/purge", url.Values{"csrf": {csrf}, "id": {"x"}}, "names no consumer group"},
	} {
		res := do(t, c, "POST", b.URL+tc.path, tc.form, nil)
		require.Equal(t, http.StatusBadRequest, res.status, tc.path)
		require.Contains(t, res.body, tc.want, tc.path)
	}
	// A requeue of IDs that are not dead changes nothing and says so.
	res := do(t, c, "POST", b.URL+"outbox/requeue", url.Values{"csrf": {csrf}, "id": {"unknown-1"}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Contains(t, get(t, c, b.Server.URL+res.header.Get("Location")).body, "Requeued 0 of 1")
	// Oversized form bodies are refused.
	huge := url.Values{"csrf": {csrf}, "id": {strings.Repeat("y", 2<<20)}}
	require.Equal(t, http.StatusBadRequest, do(t, c, "POST", b.URL+"outbox/requeue", huge, nil).status)
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// TestNoTokenMeansLoopbackOnly: without a token the handler refuses
// peers that are not on this machine, and CheckListen refuses to bind
// anything but loopback.
func TestNoTokenMeansLoopbackOnly(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{})
	for _, remote := range []string{"10.0.0.7:40000", "192.168.1.20:5000", "[2001:db8::1]:443"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = remote
		w := httptest.NewRecorder()
		b.Dash.ServeHTTP(w, req)
		require.Equal(t, http.StatusForbidden, w.Code, remote)
		require.Contains(t, w.Body.String(), "answers only clients on this machine")
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "[::1]:5000"
	req.Host = "localhost:8089"
	w := httptest.NewRecorder()
	b.Dash.ServeHTTP(w, req)
	require.Equal(t, http.StatusOK, w.Code)

	for addr, ok := range map[string]bool{
		"127.0.0.1:8089": true, "[::1]:8089": true, "localhost:8089": true,
		"0.0.0.0:8089": false, ":8089": false, "10.1.2.3:8089": false, "example.com:80": false,
	} {
		err := dashboard.CheckListen(addr, "")
		require.Equal(t, ok, err == nil, addr)
		require.NoError(t, dashboard.CheckListen(addr, "some-token"), addr)
	}
	require.Error(t, dashboard.CheckListen("no-port", "t"))
}

// TestNoCredentialRendered opens the dashboard over a DSN with a
// password and checks that no page carries it.
func TestNoCredentialRendered(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{})
	cfg, err := mysql.ParseDSN(b.DSN)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.Passwd)
	db, err := testbed.Open(b.DSN)
	require.NoError(t, err)
	d, err := dashboard.New(db, dashboard.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	c := client(t)
	secret := cfg.User + ":" + cfg.Passwd + "@"
	for _, p := range []string{"/", "/outbox", "/consumers", "/tx?q=a", "/outbox/row?id=nope", "/nope"} {
		res := get(t, c, srv.URL+p)
		require.NotContains(t, res.body, secret, p)
		if p == "/" {
			require.Contains(t, res.body, cfg.User+":****@", "the database is shown, redacted")
		}
	}
}

// serveAs sends one GET of path to d from peer with the Host header host
// and returns the recorded answer.
func serveAs(d http.Handler, peer, host, path string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.RemoteAddr = peer
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	d.ServeHTTP(w, req)
	return w
}

// TestHostHeaderIsChecked: a page of another site can reach a dashboard
// on this machine through a name that resolves to 127.0.0.1 (DNS
// rebinding); the browser then sends that name as Host. Without a token
// the dashboard answers loopback names and the configured hosts only;
// with a token and AllowedHosts, the configured hosts and loopback names
// only.
func TestHostHeaderIsChecked(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{})
	dead := b.ParkedRow("k", []byte(`{"secret":"s3cr3t-body"}`), "x")
	forged := []string{"evil.example", "evil.example:8089", "127.0.0.1.evil.example:8089", "localhost.evil.example",
		"rebind.attacker.test:80", "10.0.0.7:8089", "", "dash.example.com"}
	for _, host := range forged {
		for _, path := range []string{"/", "/outbox?status=parked", "/outbox/row?id=" + dead} {
			w := serveAs(b.Dash, "127.0.0.1:50000", host, path, nil)
			require.Equal(t, http.StatusForbidden, w.Code, "%s %s", host, path)
			require.Contains(t, w.Body.String(), "AllowedHosts", host)
			require.NotContains(t, w.Body.String(), "s3cr3t-body", host)
			require.NotContains(t, w.Body.String(), dead, host)
			require.NotContains(t, w.Body.String(), "tcp(", "the refusal does not show the database")
		}
	}
	for _, host := range []string{"localhost", "localhost:8089", "LOCALHOST:8089", "127.0.0.1", "127.0.0.1:8089", "127.5.6.7:80", "[::1]", "[::1]:8089"} {
		w := serveAs(b.Dash, "[::1]:50000", host, "/outbox/row?id="+dead, nil)
		require.Equal(t, http.StatusOK, w.Code, host)
		require.Contains(t, w.Body.String(), "s3cr3t-body", host)
	}

	// Configured hosts, with or without a port.
	db, err := testbed.Open(b.DSN)
	require.NoError(t, err)
	d, err := dashboard.New(db, dashboard.Config{AllowedHosts: []string{"Dash.Example.com", "ops.example.net:9000"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	for host, ok := range map[string]bool{
		"dash.example.com": true, "dash.example.com:8089": true, "ops.example.net:9000": true, "localhost:8089": true,
		"ops.example.net": false, "ops.example.net:9001": false, "evil.example": false, "x.dash.example.com": false,
	} {
		w := serveAs(d, "127.0.0.1:50000", host, "/outbox", nil)
		require.Equal(t, ok, w.Code == http.StatusOK, "%s: %d", host, w.Code)
	}
	for _, bad := range [][]string{{""}, {"http://dash.example.com"}, {"dash.example.com/x"}, {"a b"}, {"[::1"}} {
		_, err := dashboard.New(db, dashboard.Config{AllowedHosts: bad})
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "%q", bad)
		require.ErrorContains(t, err, "AllowedHosts", "%q", bad)
	}

	// With a token and AllowedHosts the check applies too, even to a
	// request that carries the token.
	const token = "tok-host-7d1e"
	dt, err := dashboard.New(db, dashboard.Config{Token: token, AllowedHosts: []string{"dash.example.com"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dt.Close() })
	bearer := map[string]string{"Authorization": "Bearer " + token}
	require.Equal(t, http.StatusForbidden, serveAs(dt, "10.0.0.7:4000", "evil.example", "/outbox", bearer).Code)
	require.Equal(t, http.StatusOK, serveAs(dt, "10.0.0.7:4000", "dash.example.com", "/outbox", bearer).Code)
	require.Equal(t, http.StatusOK, serveAs(dt, "127.0.0.1:4000", "localhost:8089", "/outbox", bearer).Code)
}

// TestLoginRedirectStaysOnThisSite logs in through the form of a
// dashboard mounted at the root, where nothing is put before the target,
// with targets that browsers would take off-site: each redirect goes to
// "/".
func TestLoginRedirectStaysOnThisSite(t *testing.T) {
	t.Parallel()
	const token = "tok-next-4a9c"
	b := dashtest.New(t, dashtest.Options{Token: token})
	for _, next := range []string{"/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "/\\evil.example", "\\\\evil.example",
		"/%2f%2fevil.example", "/%5cevil.example", "//evil.example", "///evil.example", "/.//evil.example",
		" //evil.example", "javascript:alert(1)", "http://evil.example/"} {
		form := url.Values{"token": {token}, "name": {"alice"}, "next": {next}}
		req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		b.Dash.ServeHTTP(w, req)
		require.Equal(t, http.StatusSeeOther, w.Code, "%q: %s", next, w.Body)
		assert.Equal(t, "/", w.Header().Get("Location"), "%q", next)

		page := httptest.NewRecorder()
		b.Dash.ServeHTTP(page, httptest.NewRequest("GET", "/login?next="+url.QueryEscape(next), nil))
		require.Equal(t, http.StatusOK, page.Code)
		assert.Contains(t, page.Body.String(), `name="next" value="/"`, "%q", next)
	}
	form := url.Values{"token": {token}, "next": {"/outbox?status=parked&key=k"}}
	req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	b.Dash.ServeHTTP(w, req)
	require.Equal(t, "/outbox?status=parked&key=k", w.Header().Get("Location"))
}

// TestLargeBodiesAreCutWithADownload stores a 7.3 MB text body in a dead
// outbox row and a 6 MB one in a parked message: their pages show the
// body's start as text (cut between runes, not inside one, which would
// turn it into a hex dump), say that it is cut, and link to a download of
// the whole body, which comes back byte for byte as an attachment.
func TestLargeBodiesAreCutWithADownload(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{})
	text := []byte(strings.Repeat("€ order line ", 7_300_000/15))
	dead := b.ParkedRow("big", text, "message too large")
	parked := b.Parked("shipping", "big", text[:6_000_000], "not json")
	c := client(t)
	for _, tc := range []struct{ page, download string }{
		{"outbox/row?id=" + dead, "outbox/row/body?id=" + dead},
		{"consumers/message?group=shipping&id=" + parked, "consumers/message/body?group=shipping&id=" + parked},
	} {
		page := get(t, c, b.URL+tc.page)
		require.Equal(t, http.StatusOK, page.status, tc.page)
		require.Less(t, len(page.body), 256<<10, tc.page)
		require.Contains(t, page.body, "shown as text, cut", tc.page)
		require.Contains(t, page.body, "€ order line € order line", tc.page)
		href := `href="` + Mount("/"+tc.download) + `"`
		require.Contains(t, page.body, href, tc.page)

		res, err := c.Get(b.URL + tc.download)
		require.NoError(t, err)
		got, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusOK, res.StatusCode, tc.download)
		require.Equal(t, "application/octet-stream", res.Header.Get("Content-Type"))
		require.Contains(t, res.Header.Get("Content-Disposition"), "attachment")
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
		if strings.HasPrefix(tc.page, "outbox") {
			require.Equal(t, len(text), len(got))
			require.True(t, string(text) == string(got), "the whole body")
		} else {
			require.True(t, string(text[:6_000_000]) == string(got), "the whole body")
		}
	}
	for path, status := range map[string]int{
		"outbox/row/body?id=nope": 404, "outbox/row/body": 400,
		"consumers/message/body?group=shipping&id=nope": 404, "consumers/message/body?id=" + parked: 400,
	} {
		require.Equal(t, status, get(t, c, b.URL+path).status, path)
	}
}

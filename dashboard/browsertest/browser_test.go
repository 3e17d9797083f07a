package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
	"github.com/txmsg/txmsg/internal/testbed"
)

// chromium returns the browser binary: $TXMSG_CHROMIUM, else the first
// of the usual names on PATH. Without one the test skips, or fails with
// TXMSG_REQUIRE_SERVICES=1.
func chromium(t *testing.T) string {
	t.Helper()
	msg := "no Chromium found (chromium, chromium-browser, google-chrome on PATH, or $TXMSG_CHROMIUM): run scripts/chromium.sh, or make test-browser"
	if p := os.Getenv("TXMSG_CHROMIUM"); p != "" {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
		msg = "TXMSG_CHROMIUM=" + p + " is not an executable: run scripts/chromium.sh, or fix TXMSG_CHROMIUM"
	} else {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
	}
	if testbed.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium for t and returns a tab's context
// that accepts every confirm() dialog.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // root in containers and CI
		chromedp.WindowSize(1360, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return ctx
}

// run runs steps one by one, each within a minute, and names the one
// that fails.
func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	for i, step := range steps {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := chromedp.Do(sctx, step)
		cancel()
		if err != nil {
			loc, _ := chromedp.Run(ctx, chromedp.Location())
			t.Fatalf("step %d of %d at %s: %v", i+1, len(steps), loc, err)
		}
	}
}

func text(t *testing.T, ctx context.Context, sel chromedp.CSS) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// shots writes a PNG of the page into docs/img when TXMSG_SCREENSHOTS=1.
type shots struct {
	t   *testing.T
	dir string
}

func newShots(t *testing.T) *shots {
	if os.Getenv("TXMSG_SCREENSHOTS") != "1" {
		return &shots{t: t}
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "docs", "img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &shots{t: t, dir: dir}
}

func (s *shots) take(ctx context.Context, name string) {
	if s.dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		s.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(s.dir, "dashboard-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("wrote %s", path)
}

// TestOperatorRequeuesAndReplaysInTheBrowser logs in, finds a parked
// outbox row from the overview, requeues it with the UI and sees the
// relay publish it on the real broker; then replays a parked message,
// which the consumer's inbox handles. With TXMSG_SCREENSHOTS=1 it writes
// a screenshot of every page into docs/img.
func TestOperatorRequeuesAndReplaysInTheBrowser(t *testing.T) {
	const token = "browser-test-token-5d1c"
	ctx := browser(t)
	b := dashtest.New(t, dashtest.Options{Broker: true, Token: token, AllowActions: true})
	shot := newShots(t)

	// Traffic for the chart and the tables: orders published through the
	// outbox and handled by the consumer, one handled by another group too.
	var sent []string
	for i := range 12 {
		id := b.PendingRow("order-"+itoa(1000+i), dashtest.Event{Order: "o-" + itoa(1000+i), Qty: 1 + i%4})
		sent = append(sent, id)
	}
	for _, id := range sent {
		b.Observer.Delivered(t, id)
	}
	b.Barrier(sent[0])
	b.Handled("billing-service", sent[0])
	dead := b.ParkedRow("order-2001", dashtest.Body(dashtest.Event{Order: "o-2001", Qty: 7}),
		"send 1 message(s) to "+b.Topic+": the broker answered SERVICE_NOT_AVAILABLE (attempt 20 of 20)")
	b.ParkedRow("order-2002", []byte{0x0a, 0x07, 0x6f, 0x2d, 0x32, 0x30, 0x30, 0x32, 0x10, 0x03, 0xff}, "send: message body too large for the broker")
	parked := b.Parked(b.Group, "order-2003", dashtest.Body(dashtest.Event{Order: "o-2003", Qty: 2}),
		`json: cannot unmarshal string into Go struct field Event.qty of type int`)
	b.Parked("audit-log", "order-2004", []byte("<order id=2004/>"), "invalid character '<' looking for beginning of value")

	// Log in: the overview sends the browser to the login form first.
	run(t, ctx, chromedp.Navigate(b.URL))
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS("#login")))
	shot.take(ctx, "login")
	run(t, ctx,
		chromedp.SendKeys(chromedp.CSS(`#login input[name="name"]`), "alice"),
		chromedp.SendKeys(chromedp.CSS(`#login input[name="token"]`), token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#outbox-stats")),
	)
	if got := text(t, ctx, "#parked-count"); got != "2" {
		t.Fatalf("overview shows %s parked rows, want 2", got)
	}
	// Let the chart gather samples, then photograph the overview. For the
	// screenshots, a minute of bursts through the outbox gives the chart
	// something to draw.
	if shot.dir != "" {
		for i := range 60 {
			b.Burst(20 + (i*37)%160)
			time.Sleep(time.Second)
		}
	}
	time.Sleep(3 * time.Second)
	run(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#chart")))
	shot.take(ctx, "overview")

	// From the overview to the parked rows, select the row, requeue it.
	row := chromedp.CSS(`#outbox-rows tr[data-msg-id="` + dead + `"]`)
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#parked-count")),
		chromedp.WaitVisible(row),
	)
	shot.take(ctx, "outbox")
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`#outbox-rows tr[data-msg-id="`+dead+`"] a`)),
		chromedp.WaitVisible(chromedp.CSS("#body")),
	)
	if got := text(t, ctx, "#row-id"); got != dead {
		t.Fatalf("row page shows %q, want %s", got, dead)
	}
	shot.take(ctx, "outbox-row")
	run(t, ctx,
		chromedp.Navigate(b.URL+"outbox?status=dead"),
		chromedp.WaitVisible(row),
		chromedp.Click(chromedp.CSS(`#outbox-rows tr[data-msg-id="`+dead+`"] input[name="id"]`)),
		chromedp.WaitEnabled(chromedp.CSS("#requeue")),
		chromedp.Click(chromedp.CSS("#requeue")),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	)
	if got := text(t, ctx, "#flash"); !strings.Contains(got, "Requeued 1 of 1") {
		t.Fatalf("after requeue the page says %q", got)
	}
	b.Observer.Delivered(t, dead)
	if got := string(b.Observer.First(dead).Body); got != `{"order":"o-2001","qty":7}` {
		t.Fatalf("the broker delivered %s", got)
	}

	// Consumers: replay the parked message; the inbox handles it.
	msgRow := `.parked-group[data-group="` + b.Group + `"] tr[data-msg-id="` + parked + `"]`
	run(t, ctx,
		chromedp.Navigate(b.URL+"consumers"),
		chromedp.WaitVisible(chromedp.CSS(msgRow)),
	)
	shot.take(ctx, "consumers")
	run(t, ctx,
		chromedp.Click(chromedp.CSS(msgRow+" a")),
		chromedp.WaitVisible(chromedp.CSS("#body")),
	)
	shot.take(ctx, "consumers-message")
	run(t, ctx,
		chromedp.Navigate(b.URL+"consumers"),
		chromedp.WaitVisible(chromedp.CSS(msgRow)),
		chromedp.Click(chromedp.CSS(msgRow+` input[name="id"]`)),
		chromedp.WaitEnabled(chromedp.CSS(`.parked-group[data-group="`+b.Group+`"] button.replay`)),
		chromedp.Click(chromedp.CSS(`.parked-group[data-group="`+b.Group+`"] button.replay`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	)
	if got := text(t, ctx, "#flash"); !strings.Contains(got, "Replayed 1 message(s)") {
		t.Fatalf("after replay the page says %q", got)
	}
	if !b.WaitHandled(b.Group, parked, 2*time.Minute) {
		t.Fatalf("the consumer's inbox never handled the replayed message %s", parked)
	}

	// Transactions: the replayed message, then a key.
	run(t, ctx,
		chromedp.Navigate(b.URL+"tx"),
		chromedp.SendKeys(chromedp.CSS(`#lookup input[name="q"]`), sent[0]),
		chromedp.Submit(chromedp.CSS("#lookup")),
		chromedp.WaitVisible(chromedp.CSS(`.txid[data-msg-id="`+sent[0]+`"]`)),
	)
	if got := text(t, ctx, chromedp.CSS(`.txid[data-msg-id="`+sent[0]+`"] .barrier`)); got != "committed" {
		t.Fatalf("barrier of %s shows %q", sent[0], got)
	}
	// The broker's key index may lag its store a little.
	deadline := time.Now().Add(time.Minute)
	for {
		run(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#broker-messages")))
		if strings.Contains(text(t, ctx, "#broker-messages"), sent[0]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the transaction page never showed %s on the broker", sent[0])
		}
		time.Sleep(time.Second)
	}
	shot.take(ctx, "transactions")

	// Broker: the consumer group's lag on the topic drops to zero once
	// the consumer has committed its offsets (every few seconds).
	lag := chromedp.CSS(`#lag tr[data-group="` + b.Group + `"] td.lag`)
	deadline = time.Now().Add(time.Minute)
	for {
		run(t, ctx, chromedp.Navigate(b.URL+"broker"), chromedp.WaitVisible(lag))
		if text(t, ctx, lag) == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker page never showed group %s caught up: lag %s", b.Group, text(t, ctx, lag))
		}
		time.Sleep(time.Second)
	}
	shot.take(ctx, "broker")
}

// TestOperatorSeesAFailingConsumerInTheBrowser: a handler that keeps
// failing on one message shows on the Consumers page, under its group,
// with its failures and its error.
func TestOperatorSeesAFailingConsumerInTheBrowser(t *testing.T) {
	const token = "browser-test-token-9a3e"
	ctx := browser(t)
	b := dashtest.New(t, dashtest.Options{Token: token, AllowActions: true})
	shot := newShots(t)
	const cause = "charge card for order o-3001: payment gateway answered 502 Bad Gateway"
	id := b.Failing("billing-service", "order-3001", dashtest.Body(dashtest.Event{Order: "o-3001", Qty: 1}), cause, 4)

	run(t, ctx, chromedp.Navigate(b.URL+"consumers"))
	run(t, ctx,
		chromedp.WaitVisible(chromedp.CSS("#login")),
		chromedp.SendKeys(chromedp.CSS(`#login input[name="name"]`), "alice"),
		chromedp.SendKeys(chromedp.CSS(`#login input[name="token"]`), token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
	)
	row := `.failing-group[data-group="billing-service"] tr[data-msg-id="` + id + `"]`
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS("#failing")), chromedp.WaitVisible(chromedp.CSS(row)))
	if got := text(t, ctx, chromedp.CSS(row+" td.err")); got != cause {
		t.Fatalf("the failing row shows error %q, want %q", got, cause)
	}
	if got := text(t, ctx, chromedp.CSS(row+" td.failures")); got != "4" {
		t.Fatalf("the failing row shows %s failures, want 4", got)
	}
	shot.take(ctx, "consumers-failing")
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var d []byte
	for ; i > 0; i /= 10 {
		d = append([]byte{byte('0' + i%10)}, d...)
	}
	return string(d)
}

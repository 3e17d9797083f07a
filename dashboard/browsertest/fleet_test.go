package browsertest

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
	"github.com/txmsg/txmsg/internal/testbed"
)

// TestFleetAndHistoryInTheBrowser: a replica's consumer cut off from its
// name server shows red in the overview's fleet card, and after
// transactional-mode traffic the charts draw the sent, handled and
// check-back series; the overview gets there by its own auto-refresh,
// which an operator turns off for good (it stays off after a reload).
func TestFleetAndHistoryInTheBrowser(t *testing.T) {
	ctx := browser(t)
	shot := newShots(t)
	b := dashtest.New(t, dashtest.Options{Broker: true, SampleInterval: 500 * time.Millisecond})
	cut := testbed.Name(t, "bfcut")
	ns, _ := b.Replica(cut, 500*time.Millisecond)
	ns.Cut()
	b.TransactionalTraffic(5)

	failing := `#fleet tbody.fleet-group.bad[data-group="` + cut + `"] tr.instance.failing td.state.failing`
	run(t, ctx,
		chromedp.Navigate(b.URL),
		// Without a reload of its own: the page refreshes itself every 10 s.
		chromedp.WaitVisible(chromedp.CSS(failing)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-hour path.rate.s-sent`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-hour path.rate.s-handled`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-hour path.rate.s-cb-commit`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-day .rate.s-sent`)),
		chromedp.WaitReady(chromedp.CSS(`#fleet tbody.fleet-group[data-group="`+b.Group+`"] tr.instance.live`)), // its group is closed: all live
	)
	color, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('`+failing+`')).color`))
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, chromedp.CSS(failing+` span.err`)); got == "" {
		t.Error("the failing replica shows no error")
	}
	shot.take(ctx, "fleet")
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#autorefresh")),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#autorefresh")),
	)
	checked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('autorefresh').checked`))
	if err != nil {
		t.Fatal(err)
	}
	if color != "rgb(192, 57, 43)" {
		t.Errorf("the failing replica's state is drawn in %s, want the dashboard's red rgb(192, 57, 43)", color)
	}
	if checked {
		t.Error("auto-refresh is on again after a reload; the operator turned it off")
	}
}

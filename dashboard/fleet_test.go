package dashboard_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
	"github.com/txmsg/txmsg/internal/testbed"
)

// relayState is the state cell of one relay's row of the overview.
func relayState(page, name string) (state, errText string) {
	re := regexp.MustCompile(`(?s)<tr class="relay" data-relay="` + regexp.QuoteMeta(name) + `">.*?<td class="state (\w+)"[^>]*>\w+(?:<br><span class="err">([^<]+)</span>)?</td></tr>`)
	m := re.FindStringSubmatch(page)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

// TestOverviewShowsFailingRelay: a second relay on the bed's outbox table,
// as another replica's would be, cannot reach the broker (its name server
// is at 127.0.0.1:1) while rows are pending. The overview, served by a
// process whose own relay is healthy, shows that relay failing with its
// broker error and the bed's relay live.
func TestOverviewShowsFailingRelay(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{Broker: true})
	ctx := context.Background()
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{"127.0.0.1:1"}},
		Group: testbed.Name(t, "dpgcut"), SendTimeout: time.Second, Retries: 1})
	require.NoError(t, err)
	require.NoError(t, pub.Start(ctx))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	name := "cut-off-" + testbed.Suffix()
	relay, err := outbox.NewRelay(b.Outbox, pub, outbox.RelayConfig{Name: name, Ordered: true,
		PollInterval: 200 * time.Millisecond, HandOverAfter: -1})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	// The bed's relay holds every bucket at first: wait until the
	// cut-off relay has its share, so that rows land in its buckets.
	require.Eventually(t, func() bool {
		rs, err := b.Outbox.Relays(ctx)
		require.NoError(t, err)
		for _, r := range rs {
			if r.Name == name && len(r.Buckets) > 0 {
				return true
			}
		}
		return false
	}, 60*time.Second, 200*time.Millisecond, "relay %s never got a bucket", name)
	for i := range 40 {
		b.PendingRow("fleet-"+strconv.Itoa(i), dashtest.Event{Order: "fleet", Qty: i})
	}

	c := client(t)
	deadline := time.Now().Add(90 * time.Second)
	for {
		page := get(t, c, b.URL)
		require.Equal(t, http.StatusOK, page.status, page.body)
		bad, errText := relayState(page.body, name)
		good, _ := relayState(page.body, b.Relay)
		if bad == "failing" && errText != "" && good == "live" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview never showed %s failing and %s live; its relays card:\n%s", name, b.Relay,
				regexp.MustCompile(`(?s)<div class="card" id="relays">.*?</div>`).FindString(page.body))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

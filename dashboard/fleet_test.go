package dashboard_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/heartbeat"
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

// fleetInstance is the state cell of the first instance of group's row of
// the overview's fleet card, and its error.
func fleetInstance(page, group string) (state, errText string) {
	re := regexp.MustCompile(`(?s)data-group="` + regexp.QuoteMeta(group) + `">.*?<tr class="instance \w+" data-instance="[^"]*"><td[^>]*>.*?</td><td class="state (\w+)">\w+(?:<br><span class="err">([^<]+)</span>)?</td>`)
	m := re.FindStringSubmatch(page)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

// TestOverviewFleet: two more consumers of the bed's topic, as other
// replicas' would be, write their heartbeats into the instance table. One
// is cut off from its name server: the fleet card shows it failing with
// its Health error. The other loses its database, as a killed process
// stops heartbeating: it turns stale. The bed's own consumer stays live.
func TestOverviewFleet(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{Broker: true})
	cutGroup, deadGroup := testbed.Name(t, "dfcut"), testbed.Name(t, "dfdead")
	ns, _ := b.Replica(cutGroup, 500*time.Millisecond)
	_, db := b.Replica(deadGroup, 300*time.Millisecond)
	c := client(t)
	waitFleet := func(what string, ok func(page string) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			page := get(t, c, b.URL)
			require.Equal(t, http.StatusOK, page.status, page.body)
			if ok(page.body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the fleet card never showed %s:\n%s", what,
					regexp.MustCompile(`(?s)<section class="card wide fleet" id="fleet">.*?</section>`).FindString(page.body))
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	waitFleet("every consumer live", func(page string) bool {
		a, _ := fleetInstance(page, cutGroup)
		d, _ := fleetInstance(page, deadGroup)
		own, _ := fleetInstance(page, b.Group)
		return a == "live" && d == "live" && own == "live"
	})
	ns.Cut()
	db.Cut()
	waitFleet("the cut-off consumer failing, the dead one stale, the bed's live", func(page string) bool {
		a, errText := fleetInstance(page, cutGroup)
		d, _ := fleetInstance(page, deadGroup)
		own, _ := fleetInstance(page, b.Group)
		return a == "failing" && errText != "" && d == "stale" && own == "live"
	})
}

// TestOverviewFleetOfFiftyReplicas: a service of 50 replicas, each with a
// consumer, a sweeper and a producer writing heartbeats through the
// components' own heartbeat writer, reads as three lines of the fleet
// card, each closed with its 50 instances; the one replica whose consumer
// fails puts its group first, open and red, with that instance on top.
func TestOverviewFleetOfFiftyReplicas(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{})
	const replicas = 50
	group := testbed.Name(t, "fifty")
	cfg := fleet.Config{Interval: 200 * time.Millisecond}.WithDefaults()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	broken := errors.New("replica 17 cannot reach the name servers")
	for i := 0; i < replicas; i++ {
		for _, kind := range []string{fleet.KindConsumer, fleet.KindSweeper, fleet.KindProducer} {
			health := func(context.Context) error { return nil }
			if i == 17 && kind == fleet.KindConsumer {
				health = func(context.Context) error { return broken }
			}
			beat := heartbeat.Start(b.DB, cfg, kind, group, health, &heartbeat.Counters{}, log)
			t.Cleanup(func() { beat.Stop(context.Background()) })
		}
	}
	c := client(t)
	tbody := regexp.MustCompile(`(?s)<tbody class="fleet-group( bad)?" data-kind="(\w+)" data-group="` + regexp.QuoteMeta(group) + `">(.*?)</tbody>\s*(?:<tbody class="fleet-group|</table>)`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		page := get(t, c, b.URL)
		require.Equal(t, http.StatusOK, page.status, page.body)
		groups := tbody.FindAllStringSubmatch(page.body, -1)
		instances := 0
		for _, g := range groups {
			instances += strings.Count(g[3], `<tr class="instance `)
		}
		if len(groups) == 3 && instances == 3*replicas {
			require.Equal(t, " bad", groups[0][1], "the group with the failing instance comes first, marked bad")
			require.Equal(t, fleet.KindConsumer, groups[0][2])
			require.Contains(t, groups[0][3], "<details open>", "the bad group is open")
			require.Regexp(t, `(?s)<td class="n">49</td><td class="n bad">1</td><td class="n">0</td>`, groups[0][3])
			state, errText := fleetInstance(page.body, group)
			require.Equal(t, fleet.StateFailing, state, "the failing instance is the first of its group")
			require.Equal(t, broken.Error(), errText)
			for _, g := range groups[1:] {
				require.Empty(t, g[1], "%s is healthy", g[2])
				require.Contains(t, g[3], "<details>", "a healthy group stays closed")
				require.Regexp(t, `<td class="n">50</td><td class="n">0</td><td class="n">0</td>`, g[3])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet card never listed %d instances in 3 groups: %d groups, %d instances", 3*replicas, len(groups), instances)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

package dashboard

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/dashboard/internal/rmqadmin"
)

// renderPage renders page with data inside the layout.
func renderPage(t *testing.T, page string, data any) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, pages[page].Execute(&buf, &view{Title: page, AppTitle: "txmsg", Base: "/ops", Nav: page, Broker: true, Data: data}))
	return buf.String()
}

// lagCellOf returns the lag cell of group's row on the broker page.
func lagCellOf(t *testing.T, page, group string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)data-group="` + regexp.QuoteMeta(group) + `">.*?(<td class="n lag[^"]*">.*?</td>)`).FindStringSubmatch(page)
	require.NotNil(t, m, "no lag cell for group %s in\n%s", group, page)
	return m[1]
}

// TestBrokerGroupWithoutOffsetsIsNotLagging: a group the broker reports
// on a topic that has never committed an offset (no consumer of it ever
// ran, or an observer that only looked) is shown as having no committed
// offsets, not as lagging by every message of the topic; amber is for a
// group with committed offsets behind the end of the queues.
func TestBrokerGroupWithoutOffsetsIsNotLagging(t *testing.T) {
	page := renderPage(t, "broker", &brokerData{NameServers: []string{"ns:9876"}, Topics: []topicLag{{
		Topic: "orders", Queues: 4, Messages: 898,
		Groups: []groupLag{
			{Group: "observer-once", Lag: 898},
			{Group: "billing", Lag: 12, Committed: true},
			{Group: "shipping", Committed: true},
		},
	}}})
	never := lagCellOf(t, page, "observer-once")
	require.NotContains(t, never, "warn")
	require.Contains(t, never, "no committed offsets")
	require.NotContains(t, never, "898")

	behind := lagCellOf(t, page, "billing")
	require.Contains(t, behind, `class="n lag warn"`)
	require.Contains(t, behind, "12")

	caughtUp := lagCellOf(t, page, "shipping")
	require.NotContains(t, caughtUp, "warn")
}

// TestLongNamesWrapAtSeparators: long topic, group and relay names wrap
// after their separators (a <wbr> after "_", "-", ".", ":" and "%"), never
// in the middle of a word, and carry their whole name as a tooltip.
func TestLongNamesWrapAtSeparators(t *testing.T) {
	const topic = "orders_service_payment_settled_events_v2_eu-west-1"
	const group = "GID_orders-service.settlement%reconciler"
	page := renderPage(t, "broker", &brokerData{Topics: []topicLag{{
		Topic: topic, Queues: 4, Groups: []groupLag{{Group: group, Committed: true}},
	}}})
	require.Contains(t, page, `<td class="name" title="`+topic+`">orders_<wbr>service_<wbr>payment_<wbr>settled_<wbr>events_<wbr>v2_<wbr>eu-<wbr>west-<wbr>1</td>`)
	require.Contains(t, page, `<td class="name" title="`+group+`">GID_<wbr>orders-<wbr>service.<wbr>settlement%<wbr>reconciler</td>`)

	page = renderPage(t, "overview", &overviewData{
		Groups: []groupView{{Group: group, Handled: 3}},
		Relays: []relayView{{Name: "relay-orders-service-7f9c4d-abcde"}},
	})
	require.Contains(t, page, `<td class="name" title="`+group+`">GID_<wbr>orders-<wbr>service.<wbr>settlement%<wbr>reconciler</td>`)
	require.Contains(t, page, `<td class="name" title="relay-orders-service-7f9c4d-abcde">relay-<wbr>orders-<wbr>service-<wbr>7f9c4d-<wbr>abcde</td>`)

	// A name is escaped as text: markup in it is not markup.
	page = renderPage(t, "broker", &brokerData{Topics: []topicLag{{Topic: "a_<b>", Err: "x"}}})
	require.Contains(t, page, `a_<wbr>&lt;b&gt;`)
}

// TestNameCellsDoNotBreakWords: the stylesheet lets name cells wrap only
// at their break points (overflow-wrap: break-word, not anywhere), after
// the rule that keeps first columns on one line.
func TestNameCellsDoNotBreakWords(t *testing.T) {
	css, err := staticFS.ReadFile("static/app.css")
	require.NoError(t, err)
	s := string(css)
	rule := regexp.MustCompile(`td\.name\s*\{([^}]*)\}`).FindStringSubmatchIndex(s)
	require.NotNil(t, rule, "no td.name rule in app.css")
	body := s[rule[2]:rule[3]]
	require.Contains(t, body, "white-space:normal")
	require.Contains(t, body, "overflow-wrap:break-word")
	require.Greater(t, rule[0], regexp.MustCompile(`td:first-child`).FindStringIndex(s)[0])
}

// groupRowOf returns the row of broker group name on the broker page.
func groupRowOf(t *testing.T, page, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-broker-group="` + regexp.QuoteMeta(name) + `".*?</tr>`).FindString(page)
	require.NotEmpty(t, m, "no row for broker group %s in\n%s", name, page)
	return m
}

// TestBrokerGroupsJudgeReplicas: the broker page's groups card shows a
// group without a master in red, a slave that does not answer, one far
// behind its master and a group that lost its slave (while others have
// one) in amber, and a healthy group as ok, with how far each slave is
// behind.
func TestBrokerGroupsJudgeReplicas(t *testing.T) {
	m := func(id int64, addr string, off int64, err string) rmqadmin.Member {
		return rmqadmin.Member{ID: id, Addr: addr, MaxOffset: off, Err: err}
	}
	ptr := func(x rmqadmin.Member) *rmqadmin.Member { return &x }
	gs := brokerGroups([]rmqadmin.Group{
		{Cluster: "c", Name: "healthy", Master: ptr(m(0, "10.0.0.1:10911", 10<<20, "")), Slaves: []rmqadmin.Member{m(1, "10.0.0.2:10911", 10<<20-300, "")}},
		{Cluster: "c", Name: "headless", Slaves: []rmqadmin.Member{m(1, "10.0.0.4:10911", 5<<20, "")}},
		{Cluster: "c", Name: "mute-slave", Master: ptr(m(0, "10.0.0.5:10911", 7<<20, "")), Slaves: []rmqadmin.Member{m(1, "10.0.0.6:10911", 0, "i/o timeout")}},
		{Cluster: "c", Name: "lagging", Master: ptr(m(0, "10.0.0.7:10911", 100<<20, "")), Slaves: []rmqadmin.Member{m(1, "10.0.0.8:10911", 90<<20, "")}},
		{Cluster: "c", Name: "orphan", Master: ptr(m(0, "10.0.0.9:10911", 1<<20, ""))},
	})
	level := map[string]string{}
	for _, g := range gs {
		level[g.Name] = g.Level
	}
	require.Equal(t, map[string]string{"healthy": "ok", "headless": "bad", "mute-slave": "warn", "lagging": "warn", "orphan": "warn"}, level)
	require.EqualValues(t, 300, gs[0].Slaves[0].Behind)
	require.EqualValues(t, -1, gs[2].Slaves[0].Behind, "a slave that did not answer has no known lag")
	require.EqualValues(t, 10<<20, gs[3].Slaves[0].Behind)

	page := renderPage(t, "broker", &brokerData{Groups: gs})
	healthy := groupRowOf(t, page, "healthy")
	require.Contains(t, healthy, `class="group ok"`)
	require.Contains(t, healthy, "10.0.0.2:10911 <small>300 B</small>")
	headless := groupRowOf(t, page, "headless")
	require.Contains(t, headless, `class="group bad"`)
	require.Contains(t, headless, "no master")
	require.Contains(t, groupRowOf(t, page, "mute-slave"), "does not answer: i/o timeout")
	require.Contains(t, groupRowOf(t, page, "lagging"), "10.0 MiB behind its master")
	require.Contains(t, groupRowOf(t, page, "orphan"), "no slave")

	// Without slaves anywhere (one master per group), no group lacks one.
	single := brokerGroups([]rmqadmin.Group{{Name: "broker-a", Master: ptr(m(0, "127.0.0.1:10911", 42, ""))}})
	require.Equal(t, "ok", single[0].Level)
}

package dashboard

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
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

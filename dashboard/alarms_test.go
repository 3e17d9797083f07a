package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
)

// TestOverviewOutboxModeIdle: lease rows and a relay row left from a
// local-table (outbox) run long ago, with no pending row, make the
// overview say the outbox mode is idle instead of flagging buckets with
// no owner; a pending row with no relay to publish it brings the warning
// back.
func TestOverviewOutboxModeIdle(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{})
	long := time.Now().UTC().Add(-3 * time.Hour)
	for i := range 8 {
		require.NoError(t, b.DB.Table(b.Outbox.Table()+"_lease").Create(&outbox.Lease{
			Bucket: i, Owner: "relay-of-last-month", ExpiresAt: long, WantedAt: long}).Error)
	}
	require.NoError(t, b.DB.Table(b.Outbox.Table()+"_relay").Create(&outbox.Member{Name: "relay-of-last-month", SeenAt: long}).Error)
	c := client(t)

	page := get(t, c, b.URL)
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.NotContains(t, page.body, `<tr class="warn"><td>(no owner)`)
	require.Contains(t, page.body, `id="outbox-idle"`)
	require.Contains(t, page.body, "Outbox mode idle")

	b.PendingRow("order-idle", dashtest.Event{Order: "o-idle", Qty: 1})
	page = get(t, c, b.URL)
	require.Contains(t, page.body, `<tr class="warn"><td>(no owner)`)
	require.NotContains(t, page.body, `id="outbox-idle"`)
}

// TestOverviewNoLeaseTableIsQuiet: without lease rows the overview says
// no relay has run and warns about nothing.
func TestOverviewNoLeaseTableIsQuiet(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{})
	page := get(t, client(t), b.URL)
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.False(t, strings.Contains(page.body, `class="warn"><td>(no owner)`))
}

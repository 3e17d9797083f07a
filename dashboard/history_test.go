package dashboard_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/dashboard"
	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
	"github.com/txmsg/txmsg/fleet"
)

// chartSeries returns the series the chart id draws, from its legend.
func chartSeries(page, id string) []string {
	box := regexp.MustCompile(`(?s)<div class="chartbox" id="` + id + `".*?</div>`).FindString(page)
	var out []string
	for _, m := range regexp.MustCompile(`<span class="series" data-series="([\w-]+)">`).FindAllStringSubmatch(box, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestHistoryTransactionalMode: a transactional stack and a consumer on
// the bed's database heartbeat their counters; after traffic, and a
// check-back answered, the overview's charts draw sent, handled and
// check-back series, from the history table.
func TestHistoryTransactionalMode(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{SampleInterval: 500 * time.Millisecond})
	b.TransactionalTraffic(5)
	c := client(t)
	require.Eventually(t, func() bool {
		page := get(t, c, b.URL)
		require.Equal(t, http.StatusOK, page.status)
		got := chartSeries(page.body, "chart-hour")
		return contains(got, "sent") && contains(got, "handled") && contains(got, "cb-commit") &&
			contains(chartSeries(page.body, "chart-day"), "sent")
	}, 60*time.Second, 300*time.Millisecond, "the charts never drew sent, handled and check-backs")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestHistoryRetention: the sampler deletes samples older than
// HistoryRetention and keeps the younger ones.
func TestHistoryRetention(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{SampleInterval: 300 * time.Millisecond, HistoryRetention: time.Hour})
	// The dashboard creates its history table.
	require.Eventually(t, func() bool { return b.DB.Migrator().HasTable(fleet.DefaultHistoryTable) }, 30*time.Second, 50*time.Millisecond)
	for _, age := range []string{"2 HOUR", "30 MINUTE"} {
		require.NoError(t, b.DB.Exec("INSERT INTO "+fleet.DefaultHistoryTable+
			" (at, span_us, sampler, sent) VALUES (UTC_TIMESTAMP(6) - INTERVAL "+age+", 1000000, 'old', 1)").Error)
	}
	count := func(where string) int64 {
		var n int64
		require.NoError(t, b.DB.Table(fleet.DefaultHistoryTable).Where(where).Count(&n).Error)
		return n
	}
	require.Eventually(t, func() bool {
		return count("at < UTC_TIMESTAMP(6) - INTERVAL 1 HOUR") == 0
	}, 30*time.Second, 200*time.Millisecond, "the sample older than the retention was never deleted")
	require.EqualValues(t, 1, count("sampler = 'old'"), "the sample inside the retention is kept")
	require.Positive(t, count("sampler <> 'old'"), "the sampler wrote samples")
}

// TestHistoryOneSampler: of two dashboards on one database only the one
// holding the lease samples; when it closes, the other takes over.
func TestHistoryOneSampler(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{SampleInterval: 200 * time.Millisecond})
	second, err := dashboard.New(b.DB, dashboard.Config{Outbox: b.Outbox, Inbox: b.Inbox, Checker: b.Checker, SampleInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Close() })
	samplers := func() []string {
		var s []string
		require.NoError(t, b.DB.Table(fleet.DefaultHistoryTable).Distinct("sampler").Pluck("sampler", &s).Error)
		return s
	}
	require.Eventually(t, func() bool {
		var n int64
		return b.DB.Table(fleet.DefaultHistoryTable).Count(&n).Error == nil && n > 0
	}, 30*time.Second, 100*time.Millisecond, "no samples: %s", regexp.MustCompile(`history: [^<]*`).FindString(get(t, client(t), b.URL).body))
	time.Sleep(2 * time.Second) // ten intervals
	require.Len(t, samplers(), 1, "two dashboards sampled")
	var rows int64
	require.NoError(t, b.DB.Table(fleet.DefaultHistoryTable).Count(&rows).Error)
	require.LessOrEqual(t, rows, int64(16), "more samples than one sampler writes")

	// The bed's dashboard closes and gives the lease up if it held it:
	// the other one samples on.
	require.NoError(t, b.Dash.Close())
	var closedAt time.Time
	require.NoError(t, b.DB.Raw("SELECT UTC_TIMESTAMP(6)").Scan(&closedAt).Error)
	require.Eventually(t, func() bool {
		var owner string
		require.NoError(t, b.DB.Table(fleet.DefaultHistoryTable+fleet.HistoryLeaseSuffix).Select("owner").Scan(&owner).Error)
		var n int64
		require.NoError(t, b.DB.Table(fleet.DefaultHistoryTable).Where("at > ? AND sampler = ?", closedAt, owner).Count(&n).Error)
		return n >= 2
	}, 10*time.Second, 100*time.Millisecond, "no dashboard sampled after the bed's closed")
	require.LessOrEqual(t, len(samplers()), 2)
}

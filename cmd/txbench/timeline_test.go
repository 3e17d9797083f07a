package main

import (
	"math"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWaitKind(t *testing.T) {
	t.Parallel()
	for q, want := range map[string]string{
		"SET TRANSACTION ISOLATION LEVEL READ COMMITTED": waitBegin,
		"START TRANSACTION": waitBegin,
		"COMMIT":            waitCommit,
		"ROLLBACK":          waitCommit,
		"SELECT `id` FROM `outbox_b5` WHERE status = 'pending' AND bucket IN (0,1) ORDER BY bucket LIMIT 100":   waitDueIDs,
		"SELECT id,topic,tags FROM `outbox_b5` WHERE id IN (1,2) AND status = 'pending' FOR UPDATE SKIP LOCKED": waitClaim,
		"SELECT id, body FROM `outbox_b5` WHERE id IN (1,2)":                                                    waitBodies,
		"UPDATE `outbox_b5` SET `status`='sent' WHERE id IN (1,2)":                                              waitMark,
		"UPDATE `outbox_b5_lease` SET owner='r1' WHERE bucket = 3":                                              waitOther,
		"SELECT next_attempt_at AS due, UTC_TIMESTAMP(6) AS db_now FROM `outbox_b5` ...":                        waitOther,
	} {
		require.Equal(t, want, waitKind(0x03, []byte(q)), q)
	}
	require.Equal(t, waitOther, waitKind(0x17, []byte{1, 2, 3}), "a prepared statement's execute")
}

func TestSplitWaits(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(msec int) time.Time { return t0.Add(time.Duration(msec) * time.Millisecond) }
	spans := []span{
		{waitMark, at(12), at(20)},
		{waitBegin, at(0), at(1)},
		{waitPublish, at(4), at(10)},
		{waitCommit, at(20), at(25)},
		{waitOther, at(22), at(30)}, // overlaps the commit: the commit counts
		{waitBegin, at(40), at(41)},
	}
	// The window from 2 ms to 35 ms: publish 4–10, mark 12–20, commit
	// 20–25, other 25–30; the rest (2–4, 10–12, 30–35) is the relay's own.
	w := splitWaits(spans, [][2]time.Time{{at(2), at(35)}})
	require.Equal(t, 6*time.Millisecond, w[waitPublish])
	require.Equal(t, 8*time.Millisecond, w[waitMark])
	require.Equal(t, 5*time.Millisecond, w[waitCommit])
	require.Equal(t, 5*time.Millisecond, w[waitOther])
	require.Equal(t, 9*time.Millisecond, w[waitRelayCPU])
	require.Zero(t, w[waitBegin])
	// Two windows add up; an empty one counts for nothing.
	w = splitWaits(spans, [][2]time.Time{{at(0), at(1)}, {at(40), at(41)}, {at(50), at(50)}})
	require.Equal(t, 2*time.Millisecond, w[waitBegin])
	require.Len(t, w, 1)
	require.Equal(t, map[string]float64{waitBegin: 1, waitDueIDs: 0, waitClaim: 0, waitBodies: 0, waitPublish: 0, waitMark: 0, waitCommit: 0, waitOther: 0, waitRelayCPU: 0}, w.means(2))

	k := kindPercentiles(spans)
	require.Equal(t, map[string]float64{"count": 2, "p50": 1, "p99": 1, "max": 1}, k[waitBegin])
	require.Equal(t, map[string]float64{"count": 1, "p50": 8, "p99": 8, "max": 8}, k[waitMark])

	// Transactions: from the first begin to the commit.
	d := cycleDurations(append(spans, span{waitBegin, at(41), at(42)}, span{waitCommit, at(50), at(52)}))
	require.Equal(t, latencies{25 * time.Millisecond, 12 * time.Millisecond}, d)
}

func TestHistAcc(t *testing.T) {
	t.Parallel()
	buckets := []float64{0, 0.001, 0.002, 0.010, math.Inf(1)}
	a := &metrics.Float64Histogram{Counts: []uint64{5, 0, 0, 0}, Buckets: buckets}
	b := &metrics.Float64Histogram{Counts: []uint64{95, 8, 1, 1}, Buckets: buckets}
	var h histAcc
	require.Zero(t, h.pct(99), "empty")
	h.add(a, b) // 90 below 1 ms, 8 of 1–2 ms, 1 of 2–10 ms, 1 above 10 ms
	require.EqualValues(t, 100, h.total())
	require.Equal(t, 1.0, h.pct(50))
	require.Equal(t, 2.0, h.pct(98))
	require.Equal(t, 10.0, h.pct(99))
	require.Equal(t, 10.0, h.pct(100), "the unbounded bucket reports its lower bound")
	h.add(a, b)
	require.EqualValues(t, 200, h.total())
	h.add(a, &metrics.Float64Histogram{Counts: []uint64{1}, Buckets: buckets[:2]})
	require.EqualValues(t, 200, h.total(), "readings of another shape are left out")
}

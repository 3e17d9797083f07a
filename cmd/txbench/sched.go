package main

import (
	"math"
	"runtime/metrics"
)

// Go runtime histograms of the benchmark process, read around B5's
// trials: how long runnable goroutines (the relay's among them) waited
// for a core, and the garbage collector's stop-the-world pauses. Both
// are candidates for the latency tail that the relay's timeline shows as
// relay_cpu.

const (
	metricSched   = "/sched/latencies:seconds"
	metricGCPause = "/sched/pauses/total/gc:seconds"
)

// runtimeHists is a reading of the two histograms.
type runtimeHists struct {
	sched, gc *metrics.Float64Histogram
}

func readRuntimeHists() runtimeHists {
	s := []metrics.Sample{{Name: metricSched}, {Name: metricGCPause}}
	metrics.Read(s)
	var h runtimeHists
	if s[0].Value.Kind() == metrics.KindFloat64Histogram {
		h.sched = s[0].Value.Float64Histogram()
	}
	if s[1].Value.Kind() == metrics.KindFloat64Histogram {
		h.gc = s[1].Value.Float64Histogram()
	}
	return h
}

// histAcc adds up the differences of readings of one histogram.
type histAcc struct {
	counts  []uint64
	buckets []float64
}

// add adds b − a, two readings of the same histogram.
func (h *histAcc) add(a, b *metrics.Float64Histogram) {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return
	}
	if h.counts == nil {
		h.counts, h.buckets = make([]uint64, len(b.Counts)), b.Buckets
	}
	if len(h.counts) != len(b.Counts) {
		return
	}
	for i := range b.Counts {
		h.counts[i] += b.Counts[i] - a.Counts[i]
	}
}

func (h *histAcc) total() uint64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	return n
}

// pct is the p-th percentile in milliseconds: the upper bound of the
// bucket it falls in (its lower bound for the last, unbounded bucket); 0
// when empty.
func (h *histAcc) pct(p float64) float64 {
	n := h.total()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(float64(n) * p / 100))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= max(rank, 1) {
			hi := h.buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = h.buckets[i]
			}
			return hi * 1000
		}
	}
	return 0
}

// summary is h for the JSON details.
func (h *histAcc) summary() map[string]any {
	return map[string]any{"count": h.total(), "p50_ms": round3(h.pct(50)), "p99_ms": round3(h.pct(99)),
		"p999_ms": round3(h.pct(99.9)), "max_ms": round3(h.pct(100))}
}

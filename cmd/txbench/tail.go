package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// The stages of an outbox message's commit → broker-ack latency (B5), from
// timestamps the benchmark takes around the relay: Transact returning (the
// commit), the start and end of the relay's claim SELECT … FOR UPDATE
// (gorm callbacks on the relay's own pool), Publish being called and
// returning (a wrapper around the relay's Publisher). The slowest 1 %
// split into these stages names what sets the tail.

// stageNames are the stages in order, as the JSON names them.
var stageNames = []string{"commit_to_claim", "claim", "claimed_to_publish", "publish"}

// stageRec is one acknowledged message's latency and its stages.
type stageRec struct {
	total time.Duration
	// parts are commit → claim start (the relay's loop: the nudge, the
	// wake-up, or the cycle it was busy with), the claim SELECT, claim end
	// → Publish called (loading bodies, building messages, earlier
	// Publish calls of the same claim), Publish called → acknowledged.
	parts [4]time.Duration
	split bool // parts are known
	early bool // acknowledged before Transact returned; counted as 0
	// commit and claimAt bound the commit → claim stage, for its split
	// over the relay's timeline (timeline.go).
	commit, claimAt time.Time
}

// newStageRec splits the latency of a message committed at commit and
// acknowledged at ack, published by a call made at called within a claim
// that ran from claimAt to claimEnd. The commit is recorded when Transact
// returns, just after its COMMIT, so a claim may start a little before it:
// that stage then counts as 0.
func newStageRec(commit, claimAt, claimEnd, called, ack time.Time) stageRec {
	r := stageRec{total: ack.Sub(commit), commit: commit, claimAt: claimAt}
	r.parts[3] = ack.Sub(called)
	if claimAt.UnixNano() > 0 && !called.Before(claimEnd) && !claimEnd.Before(claimAt) {
		r.parts[0] = max(claimAt.Sub(commit), 0)
		r.parts[1] = claimEnd.Sub(later(claimAt, commit))
		if claimEnd.Before(commit) {
			r.parts[1] = 0
		}
		r.parts[2] = called.Sub(later(claimEnd, commit))
		r.split = true
	}
	return r
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// tailSummary is the mean of each stage over the slowest messages.
type tailSummary struct {
	pct   float64
	n     int
	from  time.Duration // the fastest of them
	mean  [4]time.Duration
	total time.Duration // mean total
	split int           // of the n, those whose stages are known
	// waits splits their commit → claim stages over the relay's
	// timeline, when it was given (withWaits).
	waits waitSplit
	slow  []stageRec // the n slowest
}

// tailOf summarises the slowest pct percent of recs (at least one).
func tailOf(recs []stageRec, pct float64) tailSummary {
	t := tailSummary{pct: pct}
	if len(recs) == 0 {
		return t
	}
	s := slices.Clone(recs)
	slices.SortFunc(s, func(a, b stageRec) int { return int(b.total - a.total) })
	t.n = max(int(math.Ceil(float64(len(s))*pct/100)), 1)
	s = s[:t.n]
	t.slow = s
	t.from = s[len(s)-1].total
	var sum time.Duration
	var parts [4]time.Duration
	for _, r := range s {
		sum += r.total
		if r.split {
			t.split++
			for i, p := range r.parts {
				parts[i] += p
			}
		}
	}
	t.total = sum / time.Duration(t.n)
	if t.split > 0 {
		for i := range parts {
			t.mean[i] = parts[i] / time.Duration(t.split)
		}
	}
	return t
}

// withWaits splits the commit → claim stage of the split messages among
// t's over spans, the relay's timeline.
func (t tailSummary) withWaits(spans []span) tailSummary {
	var windows [][2]time.Time
	for _, r := range t.slow {
		if r.split {
			windows = append(windows, [2]time.Time{r.commit, later(r.claimAt, r.commit)})
		}
	}
	t.waits = splitWaits(spans, windows)
	return t
}

// largest is the name of the stage with the largest mean.
func (t tailSummary) largest() string {
	i := 0
	for j, m := range t.mean {
		if m > t.mean[i] {
			i = j
		}
	}
	return stageNames[i]
}

func (t tailSummary) String() string {
	if t.n == 0 {
		return "no message"
	}
	if t.split == 0 {
		return fmt.Sprintf("%d messages of %.1f ms and more, mean %.1f ms, no stage known", t.n, ms(t.from), ms(t.total))
	}
	s := fmt.Sprintf("%d messages of %.1f ms and more, mean %.1f ms = commit -> claim %.1f + claim %.1f + claimed -> Publish %.1f + Publish -> ack %.1f ms (means of the %d split); largest: %s",
		t.n, ms(t.from), ms(t.total), ms(t.mean[0]), ms(t.mean[1]), ms(t.mean[2]), ms(t.mean[3]), t.split, t.largest())
	if t.waits != nil {
		s += "; the relay during commit -> claim: " + t.waits.String(t.split)
	}
	return s
}

// summary is t for the JSON details.
func (t tailSummary) summary() map[string]any {
	m := map[string]any{"percent": t.pct, "messages": t.n, "split": t.split, "from_ms": round3(ms(t.from)), "mean_ms": round3(ms(t.total))}
	if t.split > 0 {
		for i, name := range stageNames {
			m[name+"_mean_ms"] = round3(ms(t.mean[i]))
		}
		m["largest"] = t.largest()
		if t.waits != nil {
			m["commit_to_claim_waits_mean_ms"] = t.waits.means(t.split)
		}
	}
	return m
}

// stagePercentiles are p50, p99 and p99.9 of each stage over every split
// message.
func stagePercentiles(recs []stageRec) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for i, name := range stageNames {
		var l latencies
		for _, r := range recs {
			if r.split {
				l = append(l, r.parts[i])
			}
		}
		out[name] = map[string]float64{"p50": round3(l.pct(50)), "p99": round3(l.pct(99)), "p999": round3(l.pct(99.9))}
	}
	return out
}

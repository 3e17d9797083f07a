package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Interleaved, repeated trials. A ratio of two phases measured one after
// the other compares two different minutes of a machine whose speed drifts
// by more than the ratios are meant to judge. So every compared phase (a
// side) runs as short trials, and a round runs one trial of every side of
// its group back to back (the first round in order, the second in
// reverse, and so on, so that no side always runs first or always before
// its partner). Each ratio is taken per round, from
// trials seconds apart, and reported as the median over the rounds with
// its range; a range wider than ±noiseBand of the median marks the figure
// noisy, neither met nor missed.

// noiseBand is the widest spread, as a share of the median on either side,
// at which a figure is still judged against its target.
const noiseBand = 0.10

// minRounds is the fewest rounds, and so the fewest per-round ratios, of
// which a median is reported.
const minRounds = 5

// spread is a figure measured once per round.
type spread struct {
	Median, Min, Max float64
	N                int
}

// newSpread summarises vs; values that are NaN, infinite or not positive
// (a side with no operation) are left out.
func newSpread(vs []float64) (spread, bool) {
	var s []float64
	for _, v := range vs {
		if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return spread{}, false
	}
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}, true
}

// noisy reports whether the range reaches beyond ±noiseBand of the median.
func (s spread) noisy() bool {
	return s.Min < (1-noiseBand)*s.Median || s.Max > (1+noiseBand)*s.Median
}

// warmUpLabel ends the label of a side's unmeasured warm-up trial, whose
// result interleave discards.
const warmUpLabel = " warm-up"

func isWarmUp(label string) bool { return strings.HasSuffix(label, warmUpLabel) }

// side is one phase of an interleaved group.
type side struct {
	name string // the table's phase name, "B0"
	// trial runs one trial: warm unmeasured, then d measured.
	trial func(ctx context.Context, label string, warm, d time.Duration) (loadResult, error)
}

// closedSide is a side whose trials are closed loops of workers running fn.
func (b *bench) closedSide(name string, workers int, fn op) side {
	return side{name: name, trial: func(ctx context.Context, label string, warm, d time.Duration) (loadResult, error) {
		spec := loadSpec{name: label, workers: workers, warmup: warm, duration: d}
		if b.cfg.Count > 0 {
			spec.count = max(b.cfg.Count/b.cfg.Trials, 1)
		}
		return closedLoop(ctx, b.progress, spec, fn)
	}}
}

// trialRuns holds every trial of an interleaved group: runs[name][round].
type trialRuns map[string][]loadResult

// interleave runs sides in b.cfg.Trials rounds of one trial each, of
// length d after a warm-up of a quarter of d. Before the first round each
// side runs once for half of -warmup, unmeasured, so that connections,
// producers and caches are warm.
func (b *bench) interleave(ctx context.Context, group string, sides []side, d time.Duration) (trialRuns, error) {
	runs := trialRuns{}
	if len(sides) == 0 {
		return runs, nil
	}
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.name
	}
	rounds := b.cfg.Trials
	per := d + d/4
	b.progress.printf("%s: %d rounds of %s, %s each, about %s", group, rounds, strings.Join(names, " "), d,
		(time.Duration(len(sides))*(b.cfg.Warmup/2) + time.Duration(rounds*len(sides))*per).Round(time.Second))
	if warm := b.cfg.Warmup / 2; warm > 0 {
		for _, s := range sides {
			if _, err := s.trial(ctx, s.name+warmUpLabel, warm, time.Millisecond); err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	for r := range rounds {
		order := slices.Clone(sides)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		var line []string
		for _, s := range order {
			label := fmt.Sprintf("%s %d/%d", s.name, r+1, rounds)
			res, err := s.trial(ctx, label, d/4, d)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", s.name, r+1, err)
			}
			runs[s.name] = append(runs[s.name], res)
			line = append(line, fmt.Sprintf("%s %.0f/s", s.name, res.perSecond()))
		}
		b.progress.printf("%s round %d/%d: %s", group, r+1, rounds, strings.Join(line, ", "))
	}
	return runs, nil
}

// rates returns the per-round rates of side name.
func (t trialRuns) rates(name string) []float64 {
	var vs []float64
	for _, r := range t[name] {
		vs = append(vs, r.perSecond())
	}
	return vs
}

// ratios returns the per-round ratios of num's rate to den's.
func (t trialRuns) ratios(num, den string) []float64 {
	a, b := t.rates(num), t.rates(den)
	vs := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			vs = append(vs, a[i]/b[i])
		}
	}
	return vs
}

// merged pools the trials of side name into one result: their operations,
// errors, measured time and latencies, and their CPU use weighted by time.
func (t trialRuns) merged(name string) (loadResult, bool) {
	trials := t[name]
	if len(trials) == 0 {
		return loadResult{}, false
	}
	var m loadResult
	var cpu cpuUse
	for _, r := range trials {
		m.ops += r.ops
		m.errs += r.errs
		m.elapsed += r.elapsed
		m.lat = append(m.lat, r.lat...)
		if m.firstEr == nil {
			m.firstEr = r.firstEr
		}
		cpu = cpu.plus(r.cpu, r.elapsed.Seconds())
	}
	m.cpu = cpu.over(m.elapsed.Seconds())
	return m, true
}

// plus adds u, weighted by secs, to a running sum of core-seconds.
func (a cpuUse) plus(u cpuUse, secs float64) cpuUse {
	a.Cores = max(a.Cores, u.Cores)
	a.Busy += u.Busy * secs
	a.DB += u.DB * secs
	a.Broker += u.Broker * secs
	a.Bench += u.Bench * secs
	a.Other += u.Other * secs
	return a
}

// over turns a sum of core-seconds back into cores over secs.
func (a cpuUse) over(secs float64) cpuUse {
	if secs <= 0 {
		return cpuUse{}
	}
	a.Busy /= secs
	a.DB /= secs
	a.Broker /= secs
	a.Bench /= secs
	a.Other /= secs
	return a
}

// row is the table row of side name: its pooled trials, with the median
// trial rate as the rate and the range of the trial rates.
func (t trialRuns) row(name, what, unit string) (row, bool) {
	m, ok := t.merged(name)
	if !ok {
		return row{}, false
	}
	x := m.row(name, what, unit)
	if s, ok := newSpread(t.rates(name)); ok {
		x.Rate, x.RateMin, x.RateMax, x.Trials = s.Median, s.Min, s.Max, s.N
	}
	return x, true
}

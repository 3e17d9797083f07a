package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"strings"
	"sync"
	"time"
)

// chartSpan is how far back the overview's chart reaches.
const chartSpan = time.Hour

// sample is one reading of the outbox.
type sample struct {
	At      time.Time
	Pending int64
	Rate    float64 // rows published per second since the previous sample
}

// sampler reads the outbox every interval and keeps an hour of samples.
type sampler struct {
	d        *Dashboard
	interval time.Duration

	mu      sync.Mutex
	samples []sample
	lastErr string
}

func newSampler(d *Dashboard, interval time.Duration) *sampler {
	return &sampler{d: d, interval: interval}
}

func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	prev := time.Now().UTC()
	for {
		now := time.Now().UTC()
		s.take(ctx, prev, now)
		prev = now
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) take(ctx context.Context, since, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, s.d.cfg.QueryTimeout)
	defer cancel()
	st, err := s.d.ob.Stats(ctx)
	var sent int64
	if err == nil {
		sent, err = s.d.ob.SentSince(ctx, since)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			s.lastErr = err.Error()
		}
		return
	}
	s.lastErr = ""
	smp := sample{At: now, Pending: st.Pending}
	if len(s.samples) > 0 {
		if secs := now.Sub(since).Seconds(); secs > 0 {
			smp.Rate = float64(sent) / secs
		}
	}
	s.samples = append(s.samples, smp)
	cut := 0
	for cut < len(s.samples) && now.Sub(s.samples[cut].At) > chartSpan {
		cut++
	}
	s.samples = s.samples[cut:]
}

// chartView is the overview's chart: an inline SVG and its legend.
type chartView struct {
	SVG         template.HTML
	Samples     int
	Interval    time.Duration
	Span        time.Duration // what the x axis covers
	MaxPending  int64
	MaxRate     float64
	LastPending int64
	LastRate    float64
	Err         string
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH       = 720.0, 160.0
	padL, padR, padT, pB = 44.0, 44.0, 10.0, 22.0
)

// chart draws the samples: pending rows (left axis, filled) and publish
// rate (right axis, line), over the last hour or since the first sample.
func (s *sampler) chart() chartView {
	s.mu.Lock()
	samples := append([]sample(nil), s.samples...)
	cv := chartView{Samples: len(samples), Interval: s.interval, Err: s.lastErr}
	s.mu.Unlock()
	for _, p := range samples {
		cv.MaxPending = max(cv.MaxPending, p.Pending)
		cv.MaxRate = math.Max(cv.MaxRate, p.Rate)
	}
	if n := len(samples); n > 0 {
		cv.LastPending, cv.LastRate = samples[n-1].Pending, samples[n-1].Rate
	}
	now := time.Now()
	// The chart spans the last hour, or the time since the first sample
	// when the dashboard has run for less.
	span := chartSpan
	if len(samples) > 0 {
		span = min(chartSpan, max(now.Sub(samples[0].At), time.Minute))
	}
	cv.Span = span
	x := func(t time.Time) float64 {
		f := 1 - now.Sub(t).Seconds()/span.Seconds()
		return padL + math.Max(0, math.Min(1, f))*(chartW-padL-padR)
	}
	top := func(v, maxV float64) float64 {
		if maxV <= 0 {
			return chartH - pB
		}
		return chartH - pB - v/maxV*(chartH-pB-padT)
	}
	pMax := niceCeil(float64(cv.MaxPending))
	rMax := niceCeil(cv.MaxRate)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="Outbox depth and publish rate">`, chartW, chartH)
	// Grid and axes.
	for i := 0; i <= 4; i++ {
		y := padT + float64(i)*(chartH-pB-padT)/4
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, padL, y, chartW-padR, y)
		fmt.Fprintf(&b, `<text class="axis pending" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, padL-4, y+4, compact(pMax*float64(4-i)/4))
		fmt.Fprintf(&b, `<text class="axis rate" x="%.1f" y="%.1f">%s/s</text>`, chartW-padR+4, y+4, compact(rMax*float64(4-i)/4))
	}
	for i := 0; i <= 6; i++ {
		xx := padL + float64(i)*(chartW-padL-padR)/6
		label := "-" + roundDur(span*time.Duration(6-i)/6)
		if i == 6 {
			label = "now"
		}
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, xx, chartH-6, label)
	}
	if len(samples) > 0 {
		var area, line strings.Builder
		fmt.Fprintf(&area, "M%.1f %.1f", x(samples[0].At), chartH-pB)
		for i, p := range samples {
			fmt.Fprintf(&area, " L%.1f %.1f", x(p.At), top(float64(p.Pending), pMax))
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&line, "%s%.1f %.1f ", cmd, x(p.At), top(p.Rate, rMax))
		}
		fmt.Fprintf(&area, " L%.1f %.1f Z", x(samples[len(samples)-1].At), chartH-pB)
		fmt.Fprintf(&b, `<path class="pending" d="%s"/>`, area.String())
		fmt.Fprintf(&b, `<path class="rate" d="%s"/>`, strings.TrimSpace(line.String()))
	}
	b.WriteString(`</svg>`)
	// Every value written above is a number the dashboard computed.
	cv.SVG = template.HTML(b.String())
	return cv
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func compact(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

package dashboard

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"
)

// chartSpan is how far back the overview's first chart reaches.
const chartSpan = time.Hour

// series is one rate line of the charts: a count of the history per
// second.
type series struct {
	Key, Label string
	count      func(p point) int64
}

// rateSeries are the lines the charts may draw; a chart draws those with
// a count in its span.
var rateSeries = []series{
	{"sent", "sent (producers)", func(p point) int64 { return p.Sent }},
	{"published", "published (relays)", func(p point) int64 { return p.Published }},
	{"handled", "handled", func(p point) int64 { return p.Handled }},
	{"failed", "failed", func(p point) int64 { return p.Failed }},
	{"cb-commit", "check-backs commit", func(p point) int64 { return p.CheckBackCommit }},
	{"cb-rollback", "check-backs rollback", func(p point) int64 { return p.CheckBackRollback }},
	{"cb-unknown", "check-backs unknown", func(p point) int64 { return p.CheckBackUnknown }},
	{"swept", "swept", func(p point) int64 { return p.Swept }},
}

// legendItem is one drawn line's legend: its last and highest rate.
type legendItem struct {
	Key, Label string
	Last, Max  float64
}

// chartView is one chart of the overview: an inline SVG and its legend.
type chartView struct {
	ID, Title   string
	SVG         template.HTML
	Points      int
	Interval    time.Duration // the sample interval
	Bucket      time.Duration // the width of a point, when downsampled
	Span        time.Duration
	Series      []legendItem
	MaxPending  int64
	LastPending int64
	// LastParked and LastBarrier are the outbox's parked rows and the
	// barrier's rows at the last point.
	LastParked, LastBarrier int64
	Err                     string
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH       = 720.0, 160.0
	padL, padR, padT, pB = 44.0, 44.0, 10.0, 22.0
)

// drawChart draws pts, which end at now and cover span: the outbox's
// pending rows (left axis, filled) and each rate series with a count
// (right axis, lines).
func drawChart(id, title string, pts []point, now time.Time, span time.Duration) chartView {
	cv := chartView{ID: id, Title: title, Points: len(pts), Span: span}
	rate := func(s series, p point) float64 {
		if p.Seconds <= 0 {
			return 0
		}
		return float64(s.count(p)) / p.Seconds
	}
	var drawn []series
	var rMax float64
	for _, s := range rateSeries {
		li := legendItem{Key: s.Key, Label: s.Label}
		var any bool
		for _, p := range pts {
			any = any || s.count(p) > 0
			li.Max = math.Max(li.Max, rate(s, p))
		}
		if !any {
			continue
		}
		li.Last = rate(s, pts[len(pts)-1])
		rMax = math.Max(rMax, li.Max)
		cv.Series = append(cv.Series, li)
		drawn = append(drawn, s)
	}
	for _, p := range pts {
		cv.MaxPending = max(cv.MaxPending, p.Pending)
	}
	if n := len(pts); n > 0 {
		cv.LastPending, cv.LastParked, cv.LastBarrier = pts[n-1].Pending, pts[n-1].ParkedRows, pts[n-1].Barrier
	}
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
	rMax = niceCeil(rMax)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="%s-svg" viewBox="0 0 %.0f %.0f" role="img" aria-label="Outbox depth and the fleet's rates">`, id, chartW, chartH)
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
	if len(pts) > 0 {
		var area strings.Builder
		fmt.Fprintf(&area, "M%.1f %.1f", x(pts[0].At), chartH-pB)
		for _, p := range pts {
			fmt.Fprintf(&area, " L%.1f %.1f", x(p.At), top(float64(p.Pending), pMax))
		}
		fmt.Fprintf(&area, " L%.1f %.1f Z", x(pts[len(pts)-1].At), chartH-pB)
		fmt.Fprintf(&b, `<path class="pending" d="%s"/>`, area.String())
		for _, s := range drawn {
			if len(pts) == 1 { // a line needs two points
				p := pts[0]
				fmt.Fprintf(&b, `<circle class="rate s-%s" data-series="%s" cx="%.1f" cy="%.1f" r="3"/>`, s.Key, s.Key, x(p.At), top(rate(s, p), rMax))
				continue
			}
			var line strings.Builder
			for i, p := range pts {
				cmd := "L"
				if i == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&line, "%s%.1f %.1f ", cmd, x(p.At), top(rate(s, p), rMax))
			}
			fmt.Fprintf(&b, `<path class="rate s-%s" data-series="%s" d="%s"/>`, s.Key, s.Key, strings.TrimSpace(line.String()))
		}
	}
	b.WriteString(`</svg>`)
	// Every value written above is a number the dashboard computed, or an
	// id and series key of its own.
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

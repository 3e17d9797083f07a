package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the result table.
type row struct {
	Phase string  `json:"phase"`
	What  string  `json:"what"`
	Rate  float64 `json:"per_s"` // the median trial's, when the phase ran as trials
	Unit  string  `json:"unit"`
	// RateMin and RateMax are the slowest and fastest trials' rates, of
	// Trials trials; zero when the phase ran once.
	RateMin float64 `json:"per_s_min,omitempty"`
	RateMax float64 `json:"per_s_max,omitempty"`
	Trials  int     `json:"trials,omitempty"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	Ops     int64   `json:"ops"`
	Errors  int64   `json:"errors"`
	Secs    float64 `json:"seconds"`
	CPU     cpuUse  `json:"cpu_cores"`
	CPUms   float64 `json:"cpu_ms_per_op"`
	Note    string  `json:"note,omitempty"`
}

// results collects a run's measurements.
type results struct {
	rows    []row
	extra   map[string]any
	keys    map[string]*float64 // the JSON object's headline keys
	spreads map[string]spread   // the headline keys measured per round
}

// headline are the keys of the -json object, in order.
var headline = []string{
	"tps_b0", "tps_b1", "tps_b2", "tps_b3", "ratio_b2_b1", "ratio_b3_b0",
	"tps_f2", "tps_f3", "ratio_b2_f2", "ratio_b3_f3",
	"tps_b0r", "tps_b1r", "tps_b2r", "tps_b3r", "ratio_b2r_b1r", "ratio_b3r_b0r",
	"tps_f2r", "tps_f3r", "ratio_b2r_f2r", "ratio_b3r_f3r",
	"relay_msgs_per_s", "raw_send_msgs_per_s", "ratio_relay_raw",
	"outbox_latency_p50_ms", "outbox_latency_p99_ms", "outbox_latency_p999_ms",
	"raw_send_latency_p50_ms", "raw_send_latency_p99_ms", "raw_send_latency_p999_ms", "ratio_latency_p99_raw",
	"resolve_per_s", "resolve_p99_ms", "resolve_serial_per_s",
	"resolve_known_per_s", "select_per_s", "ratio_resolve_select",
	"resolve_known_serial_per_s", "select_serial_per_s", "ratio_resolve_serial_select",
	"resolve_cached_per_s", "resolve_cached_p99_ms", "resolve_cached_serial_per_s", "resolve_cached_serial_p99_ms",
	"ratio_resolve_cached_db", "ratio_resolve_cached_serial_db",
	"relay_rss_mib_1m", "ratio_drain_1m_vs_100k",
	"delay_late_p50_ms_raw", "delay_late_p99_ms_raw", "delay_late_max_ms_raw",
	"delay_late_p50_ms_tx", "delay_late_p99_ms_tx", "delay_late_max_ms_tx",
	"delay_late_p50_ms_local", "delay_late_p99_ms_local", "delay_late_max_ms_local",
	"ratio_delay_late_p99_tx_vs_raw", "ratio_delay_late_p99_local_vs_raw",
	"delay_drain_msgs_per_s_none", "delay_drain_msgs_per_s_future", "ratio_drain_future_vs_none",
}

// targets are the goals each headline ratio or figure is judged against.
var targets = []struct {
	key, goal string
	ok        func(float64) bool
}{
	{"ratio_b2_b1", "≥ 0.90", func(v float64) bool { return v >= 0.90 }},
	{"ratio_b3_b0", "≥ 0.70", func(v float64) bool { return v >= 0.70 }},
	{"ratio_b2r_b1r", "≥ 0.92", func(v float64) bool { return v >= 0.92 }},
	{"ratio_b3r_b0r", "≥ 0.90", func(v float64) bool { return v >= 0.90 }},
	{"ratio_b2_f2", "≥ 0.95", func(v float64) bool { return v >= 0.95 }},
	{"ratio_b3_f3", "≥ 0.95", func(v float64) bool { return v >= 0.95 }},
	{"ratio_b2r_f2r", "≥ 0.95", func(v float64) bool { return v >= 0.95 }},
	{"ratio_b3r_f3r", "≥ 0.95", func(v float64) bool { return v >= 0.95 }},
	{"ratio_latency_p99_raw", "≤ 2", func(v float64) bool { return v <= 2 }},
	{"ratio_resolve_select", "≥ 0.90", func(v float64) bool { return v >= 0.90 }},
	{"ratio_resolve_serial_select", "≥ 0.90", func(v float64) bool { return v >= 0.90 }},
	{"resolve_serial_per_s", "≥ 3000", func(v float64) bool { return v >= 3000 }},
	{"ratio_relay_raw", "≥ 1.5", func(v float64) bool { return v >= 1.5 }},
	{"outbox_latency_p99_ms", "≤ 15", func(v float64) bool { return v <= 15 }},
	{"resolve_per_s", "≥ 10000", func(v float64) bool { return v >= 10000 }},
	{"resolve_p99_ms", "≤ 5", func(v float64) bool { return v <= 5 }},
	{"resolve_cached_serial_per_s", "≥ 3000", func(v float64) bool { return v >= 3000 }},
	{"resolve_cached_per_s", "≥ 10000", func(v float64) bool { return v >= 10000 }},
	{"resolve_cached_p99_ms", "≤ 5", func(v float64) bool { return v <= 5 }},
	{"ratio_drain_1m_vs_100k", "≥ 0.8", func(v float64) bool { return v >= 0.8 }},
	{"relay_rss_mib_1m", "< 100", func(v float64) bool { return v < 100 }},
	{"delay_late_p99_ms_tx", "≤ 1000", func(v float64) bool { return v <= 1000 }},
	{"delay_late_p99_ms_local", "≤ 1000", func(v float64) bool { return v <= 1000 }},
	{"ratio_drain_future_vs_none", "≥ 0.90", func(v float64) bool { return v >= 0.90 }},
}

func newResults() *results {
	r := &results{extra: map[string]any{}, keys: map[string]*float64{}, spreads: map[string]spread{}}
	for _, k := range headline {
		r.keys[k] = nil
	}
	return r
}

func (r *results) add(x row) {
	x.CPUms = x.CPU.msPerOp(x.Rate)
	r.rows = append(r.rows, x)
}

func (r *results) set(key string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	v = round3(v)
	r.keys[key] = &v
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// setSpread records a figure measured once per round: its median under
// key, its range next to it.
func (r *results) setSpread(key string, vs []float64) {
	s, ok := newSpread(vs)
	if !ok {
		return
	}
	r.set(key, s.Median)
	r.spreads[key] = s
}

// noisy reports whether key was measured per round with a range wider
// than ±noiseBand.
func (r *results) noisy(key string) bool {
	s, ok := r.spreads[key]
	return ok && s.noisy()
}

func (r *results) get(key string) (float64, bool) {
	if p := r.keys[key]; p != nil {
		return *p, true
	}
	return 0, false
}

func (r *results) ratio(key, num, den string) {
	a, ok1 := r.get(num)
	b, ok2 := r.get(den)
	if ok1 && ok2 && b > 0 {
		r.set(key, a/b)
	}
}

// loadWhat describes the business phases; the realistic ones (suffix r)
// add ", realistic".
var loadWhat = map[string]string{
	"b0": "business tx: insert order + commit",
	"b1": "B0 + raw SendSync after commit (unsafe)",
	"b2": "txmsg transactional: Producer.Send",
	"b3": "txmsg outbox: Producer.Send (enqueue only)",
	"f2": "floor of B2: raw client transactional producer, listener commits",
	"f3": "floor of B3: B0 + one raw INSERT of the outbox row's bytes",
}

// row is the table row of a closed-loop phase.
func (res loadResult) row(phase, what, unit string) row {
	x := row{
		Phase: phase, What: what, Rate: res.perSecond(), Unit: unit,
		P50: res.lat.pct(50), P99: res.lat.pct(99), Ops: res.ops, Errors: res.errs, Secs: res.elapsed.Seconds(), CPU: res.cpu,
	}
	if res.firstEr != nil {
		x.Note = "first error: " + res.firstEr.Error()
	}
	return x
}

// business records an interleaved group of business phases: each side's
// row and median rate, each ratio's per-round median and range, and the
// CPU cost ratios of the pooled trials. suffix is "" or "r".
func (r *results) business(runs trialRuns, suffix string) {
	for _, base := range []string{"b0", "b1", "b2", "b3", "f2", "f3"} {
		id := base + suffix
		x, ok := runs.row(strings.ToUpper(id), loadWhat[base]+map[string]string{"": "", "r": ", realistic"}[suffix], "tx/s")
		if !ok {
			continue
		}
		r.add(x)
		r.setSpread("tps_"+id, runs.rates(strings.ToUpper(id)))
	}
	for _, p := range [][2]string{{"b2", "b1"}, {"b3", "b0"}, {"b2", "f2"}, {"b3", "f3"}} {
		num, den := strings.ToUpper(p[0]+suffix), strings.ToUpper(p[1]+suffix)
		key := "ratio_" + p[0] + suffix + "_" + p[1] + suffix
		r.setSpread(key, runs.ratios(num, den))
		r.costRatio("cpu_cost_"+key, num, den)
	}
}

// costRatio records cost(den)/cost(num) in CPU time per operation: the
// throughput ratio the two phases would have on a CPU-bound machine with
// nothing else running.
func (r *results) costRatio(key, num, den string) {
	var a, b float64
	for _, x := range r.rows {
		switch x.Phase {
		case num:
			a = x.CPUms
		case den:
			b = x.CPUms
		}
	}
	if a > 0 && b > 0 {
		r.extra[key] = math.Round(b/a*1000) / 1000
	}
}

func (r *results) settings(c *config, took time.Duration) {
	r.extra["settings"] = map[string]any{
		"workers": c.Workers, "relays": c.Relays, "relay_batch": c.RelayBatchSize, "warmup_s": c.Warmup.Seconds(),
		"trial_s": c.Trial.Seconds(), "trials": c.Trials, "count": c.Count, "backlog": c.Backlog, "backlog_big": c.BigBacklog,
		"queues": c.Queues, "smoke": c.Smoke, "gomaxprocs": runtime.GOMAXPROCS(0),
	}
	r.extra["total_s"] = math.Round(took.Seconds())
}

// writeJSON prints one object: the headline keys first, in order (null
// when a phase did not run), each measured per round followed by its
// range and whether it is noisy (<key>_min, <key>_max, <key>_noisy), then
// "phases" (the table's rows) and "details" (further figures and the
// settings).
func (r *results) writeJSON(w io.Writer) error {
	var buf bytes.Buffer
	buf.WriteString("{\n")
	field := func(k string, v any) error {
		b, err := json.MarshalIndent(v, "  ", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(&buf, "  %q: %s,\n", k, b)
		return nil
	}
	for _, k := range headline {
		var v any
		if p := r.keys[k]; p != nil {
			v = *p
		}
		if err := field(k, v); err != nil {
			return err
		}
		if sp, ok := r.spreads[k]; ok {
			for _, f := range []struct {
				k string
				v any
			}{{"_min", round3(sp.Min)}, {"_max", round3(sp.Max)}, {"_noisy", sp.noisy()}} {
				if err := field(k+f.k, f.v); err != nil {
					return err
				}
			}
		}
	}
	if err := field("phases", r.rows); err != nil {
		return err
	}
	if err := field("details", r.extra); err != nil {
		return err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte(",\n"))
	out = append(out, "\n}\n"...)
	_, err := w.Write(out)
	return err
}

// tableExtras are the details the table shows below the headline figures.
var tableExtras = []string{
	"cpu_cost_ratio_b2_b1", "cpu_cost_ratio_b3_b0", "cpu_cost_ratio_b2r_b1r", "cpu_cost_ratio_b3r_b0r",
	"cpu_cost_ratio_b2_f2", "cpu_cost_ratio_b3_f3", "cpu_cost_ratio_b2r_f2r", "cpu_cost_ratio_b3r_f3r",
	"relay_msgs_per_s_at_workers", "raw_send_msgs_per_s_at_workers", "ratio_relay_raw_at_workers",
	"relay_msgs_per_s_big", "resolve_serial_p99_ms",
	"resolve_cached_p50_us", "resolve_cached_p99_us", "resolve_cached_serial_p50_us", "resolve_cached_serial_p99_us",
	"outbox_latency_rate", "outbox_latency_p90_ms", "ratio_latency_p50_raw", "ratio_latency_p999_raw",
}

func (r *results) writeTable(w io.Writer) error {
	if m, ok := r.extra["machine"].(map[string]any); ok {
		fmt.Fprintf(w, "machine: %v cores, %v, load average at start %v, at end %v\n", m["nproc"], m["mem_total"], m["loadavg_at_start"], m["loadavg_at_end"])
		if d, ok := m["database"].(map[string]string); ok {
			fmt.Fprintf(w, "database: %s, innodb_flush_log_at_trx_commit=%s, sync_binlog=%s, log_bin=%s, buffer pool %s bytes\n\n",
				d["version"], d["innodb_flush_log_at_trx_commit"], d["sync_binlog"], d["log_bin"], d["innodb_buffer_pool_size"])
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\twhat\trate\t\ttrials: min-max\tp50 ms\tp99 ms\tops\terrors\tCPU ms/op\tCPU cores busy: by db, broker, bench, other\t")
	for _, x := range r.rows {
		trials := "-"
		if x.Trials > 0 {
			trials = fmt.Sprintf("%d: %.0f-%.0f", x.Trials, x.RateMin, x.RateMax)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t\n", x.Phase, x.What, x.Rate, x.Unit, trials, num(x.P50), num(x.P99), x.Ops, x.Errors, num(x.CPUms), x.CPU)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tmeasured\trounds: min-max\ttarget\t")
	for _, k := range headline {
		v, ok := r.get(k)
		val := "-"
		if ok {
			val = fmt.Sprintf("%.3f", v)
		}
		rng := ""
		if sp, ok := r.spreads[k]; ok {
			rng = fmt.Sprintf("%d: %.3f-%.3f", sp.N, sp.Min, sp.Max)
		}
		goal := ""
		for _, t := range targets {
			if t.key == k {
				state := "not measured"
				switch {
				case ok && r.noisy(k):
					state = fmt.Sprintf("NOISY (range beyond ±%.0f%%), not judged", 100*noiseBand)
				case ok:
					state = verdict(t.ok(v))
				}
				goal = t.goal + "  " + state
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", k, val, rng, goal)
	}
	for _, k := range tableExtras {
		if v, ok := r.extra[k].(float64); ok {
			fmt.Fprintf(tw, "%s\t%.3f\t\t\t\n", k, v)
		}
	}
	r.writeScale(tw)
	if err := tw.Flush(); err != nil {
		return err
	}
	if cost, ok := r.extra["cost_per_event"].(map[string]any); ok {
		fmt.Fprintln(w, "\ndatabase traffic per event (COST), with the DSN as given / with interpolateParams=true:")
		def, _ := cost["default_dsn"].(map[string]any)
		inter, _ := cost["interpolate_params"].(map[string]any)
		var names []string
		for k := range def {
			names = append(names, k)
		}
		slices.Sort(names)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "event	commands	round trips	bytes to db	")
		for _, k := range names {
			a, _ := def[k].(map[string]any)
			b, _ := inter[k].(map[string]any)
			fmt.Fprintf(tw, "%s	%v / %v	%v / %v	%v / %v	\n", k, a["commands_total_excl_close"], b["commands_total_excl_close"],
				a["round_trips"], b["round_trips"], a["bytes_to_db"], b["bytes_to_db"])
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, x := range r.rows {
		if x.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", x.Phase, x.Note)
		}
	}
	return nil
}

func num(v float64) string {
	if v == 0 {
		return "-"
	}
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// writeScale adds the scale phase's ratios to the figures: each relay
// count against the raw client at the same concurrency and against the
// best relay count, with the targets of the largest count.
func (r *results) writeScale(tw io.Writer) {
	best, ok := r.extra["scale_best_relays"].(int)
	if !ok {
		return
	}
	var counts []int
	for k := range r.extra {
		var n int
		if _, err := fmt.Sscanf(k, "scale_relays_%d_msgs_per_s", &n); err == nil {
			counts = append(counts, n)
		}
	}
	slices.Sort(counts)
	fmt.Fprintf(tw, "scale_best_relays\t%d\t\t\t\n", best)
	for i, n := range counts {
		vsRaw, _ := r.extra[fmt.Sprintf("scale_ratio_relay_raw_%d", n)].(float64)
		vsBest, _ := r.extra[fmt.Sprintf("scale_ratio_vs_best_%d", n)].(float64)
		rawGoal := "≥ 1  " + verdict(vsRaw >= 1)
		bestGoal := ""
		if i == len(counts)-1 {
			bestGoal = "≥ 0.9  " + verdict(vsBest >= 0.9)
		}
		fmt.Fprintf(tw, "scale_ratio_relay_raw_%d\t%.3f\t\t%s\t\n", n, vsRaw, rawGoal)
		fmt.Fprintf(tw, "scale_ratio_vs_best_%d\t%.3f\t\t%s\t\n", n, vsBest, bestGoal)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestMain lets the test binary serve as the benchmark's relay child
// process, as the real binary does.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSmoke runs every phase with tiny counts against the real services and
// checks that the run completes and prints every headline key. It asserts
// no figure: a smoke run measures nothing.
func TestSmoke(t *testing.T) {
	testbed.RequireBroker(t)
	testbed.DB(t) // skips or fails, like every service test, when the database is down
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	err := run(ctx, []string{"-smoke", "-json"}, &stdout, testbed.LogWriter(t))
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	for _, k := range headline {
		require.Contains(t, out, k)
		require.NotNil(t, out[k], "%s was not measured", k)
	}
}

// TestSmokeScale runs the scale phase with two relay processes on a tiny
// backlog and checks that it reports a drain and a raw row for each count.
// It asserts no figure.
func TestSmokeScale(t *testing.T) {
	testbed.RequireBroker(t)
	testbed.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	err := run(ctx, []string{"-phases", "scale", "-scale-relays", "1,2", "-backlog", "300", "-settle", "0", "-json"}, &stdout, testbed.LogWriter(t))
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	details, ok := out["details"].(map[string]any)
	require.True(t, ok, stdout.String())
	for _, k := range []string{"scale_relays_1_msgs_per_s", "scale_raw_1_msgs_per_s", "scale_relays_2_msgs_per_s", "scale_raw_2_msgs_per_s", "scale_ratio_vs_best_2"} {
		require.Contains(t, details, k)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	c, err := parseFlags([]string{"-workers", "8", "-phases", "b0,B4"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, 4, c.Relays)
	require.True(t, c.enabled("b0"))
	require.True(t, c.enabled("b4"))
	require.False(t, c.enabled("b7"))
	c, err = parseFlags(nil, &stderr)
	require.NoError(t, err)
	require.False(t, c.enabled("scale"), "all leaves the scale phase out")
	_, err = parseScale("1,x")
	require.Error(t, err)
	_, err = parseFlags([]string{"-workers", "0"}, &stderr)
	require.Error(t, err)
	_, err = parseFlags([]string{"-trials", "4"}, &stderr)
	require.Error(t, err, "a median of fewer than 5 rounds")
	c, err = parseFlags([]string{"-phases", "f3r"}, &stderr)
	require.NoError(t, err)
	require.True(t, c.enabled("business-r"))
	require.False(t, c.enabled("business"))
}

func TestLatencyPercentiles(t *testing.T) {
	t.Parallel()
	var l latencies
	for i := 1; i <= 100; i++ {
		l = append(l, time.Duration(i)*time.Millisecond)
	}
	require.InDelta(t, 50, l.pct(50), 0.001)
	require.InDelta(t, 99, l.pct(99), 0.001)
	require.InDelta(t, 100, l.pct(100), 0.001)
	require.Zero(t, latencies(nil).pct(99))
}

func TestScaleFiguresInTable(t *testing.T) {
	r := newResults()
	for n, v := range map[int][2]float64{1: {900, 1000}, 4: {2400, 1200}, 32: {2000, 2500}} {
		r.extra[fmt.Sprintf("scale_relays_%d_msgs_per_s", n)] = v[0]
		r.extra[fmt.Sprintf("scale_ratio_relay_raw_%d", n)] = v[0] / v[1]
		r.extra[fmt.Sprintf("scale_ratio_vs_best_%d", n)] = v[0] / 2400
	}
	r.extra["scale_best_relays"] = 4
	var out strings.Builder
	require.NoError(t, r.writeTable(&out))
	s := out.String()
	require.Regexp(t, `scale_best_relays\s+4`, s)
	require.Regexp(t, `scale_ratio_relay_raw_1\s+0\.900\s+≥ 1  MISSED`, s)
	require.Regexp(t, `scale_ratio_relay_raw_4\s+2\.000\s+≥ 1  met`, s)
	require.Regexp(t, `scale_ratio_vs_best_32\s+0\.833\s+≥ 0\.9  MISSED`, s)
	require.NotRegexp(t, `scale_ratio_vs_best_1\s+\S+\s+≥`, s)
}

func TestSpread(t *testing.T) {
	t.Parallel()
	s, ok := newSpread([]float64{1.0, 0.95, 1.05, 0.98, 1.02})
	require.True(t, ok)
	require.InDelta(t, 1.0, s.Median, 1e-9)
	require.InDelta(t, 0.95, s.Min, 1e-9)
	require.InDelta(t, 1.05, s.Max, 1e-9)
	require.Equal(t, 5, s.N)
	require.False(t, s.noisy())
	s, _ = newSpread([]float64{1.0, 0.85, 1.0, 1.0, 1.0, 0})
	require.Equal(t, 5, s.N, "a side with no operation is left out")
	require.True(t, s.noisy(), "0.85 is beyond -10 %")
	s, _ = newSpread([]float64{2, 4})
	require.InDelta(t, 3, s.Median, 1e-9)
	_, ok = newSpread(nil)
	require.False(t, ok)
}

// TestNoisyFigureNotJudged: a ratio whose rounds spread beyond ±10 % is
// printed as noisy, neither met nor missed, and the JSON gives its range.
func TestNoisyFigureNotJudged(t *testing.T) {
	r := newResults()
	r.setSpread("ratio_b2_b1", []float64{0.70, 0.95, 0.96, 0.97, 1.20})
	r.setSpread("ratio_b3_b0", []float64{0.71, 0.72, 0.72, 0.73, 0.74})
	var out strings.Builder
	require.NoError(t, r.writeTable(&out))
	require.Regexp(t, `ratio_b2_b1\s+0\.960\s+5: 0\.700-1\.200\s+≥ 0\.90  NOISY`, out.String())
	require.Regexp(t, `ratio_b3_b0\s+0\.720\s+5: 0\.710-0\.740\s+≥ 0\.70  met`, out.String())
	var js bytes.Buffer
	require.NoError(t, r.writeJSON(&js))
	var m map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &m), js.String())
	require.InDelta(t, 0.96, m["ratio_b2_b1"], 1e-9)
	require.InDelta(t, 0.70, m["ratio_b2_b1_min"], 1e-9)
	require.InDelta(t, 1.20, m["ratio_b2_b1_max"], 1e-9)
	require.Equal(t, true, m["ratio_b2_b1_noisy"])
	require.Equal(t, false, m["ratio_b3_b0_noisy"])
	require.NotContains(t, m, "tps_b0_min", "a figure not measured has no range")
}

func TestTrialRatiosPerRound(t *testing.T) {
	t.Parallel()
	trial := func(ops int64) loadResult { return loadResult{ops: ops, elapsed: time.Second} }
	runs := trialRuns{
		"A": {trial(90), trial(180), trial(45)},
		"B": {trial(100), trial(200), trial(50)},
	}
	require.Equal(t, []float64{0.9, 0.9, 0.9}, runs.ratios("A", "B"), "a slow round slows both sides")
	x, ok := runs.row("A", "a", "tx/s")
	require.True(t, ok)
	require.InDelta(t, 90, x.Rate, 1e-9)
	require.InDelta(t, 45, x.RateMin, 1e-9)
	require.InDelta(t, 180, x.RateMax, 1e-9)
	require.EqualValues(t, 315, x.Ops)
}

func TestTailStages(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(msec float64) time.Time { return t0.Add(time.Duration(msec * float64(time.Millisecond))) }
	var recs []stageRec
	for range 99 { // fast: claim at once, publish in 1 ms
		recs = append(recs, newStageRec(t0, at(0.5), at(1), at(1.2), at(2.2)))
	}
	// slow: the relay was busy for 900 ms before claiming
	recs = append(recs, newStageRec(t0, at(900), at(901), at(902), at(904)))
	tail := tailOf(recs, 1)
	require.Equal(t, 1, tail.n)
	require.Equal(t, "commit_to_claim", tail.largest())
	require.InDelta(t, 900, ms(tail.mean[0]), 1e-6)
	require.InDelta(t, 1, ms(tail.mean[1]), 1e-6)
	require.InDelta(t, 1, ms(tail.mean[2]), 1e-6)
	require.InDelta(t, 2, ms(tail.mean[3]), 1e-6)
	require.InDelta(t, 904, ms(tail.total), 1e-6)
	// A claim that started before Transact returned counts from the commit.
	r := newStageRec(t0, at(-1), at(0.5), at(0.7), at(1.7))
	require.True(t, r.split)
	require.Zero(t, r.parts[0])
	require.InDelta(t, 0.5, ms(r.parts[1]), 1e-6)
}

// TestInterleaveAlternates: every side is warmed up once, then each round
// runs one trial of every side, in order and then in reverse.
func TestInterleaveAlternates(t *testing.T) {
	t.Parallel()
	b := &bench{cfg: &config{Trials: minRounds, Warmup: 2 * time.Millisecond}, progress: newProgress(io.Discard), res: newResults()}
	var order []string
	mk := func(name string) side {
		return side{name: name, trial: func(_ context.Context, label string, _, _ time.Duration) (loadResult, error) {
			if isWarmUp(label) {
				order = append(order, strings.ToLower(name))
			} else {
				order = append(order, name)
			}
			return loadResult{ops: 10, elapsed: time.Second}, nil
		}}
	}
	runs, err := b.interleave(context.Background(), "t", []side{mk("A"), mk("B"), mk("C")}, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, strings.Split("a b c A B C C B A A B C C B A A B C", " "), order)
	require.Len(t, runs["A"], minRounds, "warm-ups are not kept")
}

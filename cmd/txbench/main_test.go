package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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

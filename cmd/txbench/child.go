package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
)

// childEnv, when set in the environment, makes the binary (or the test
// binary, see main_test.go) a relay process: the JSON childSpec in it says
// what to drain. The relay runs in its own process so that its resident
// memory is the relay's alone, not the benchmark's.
const childEnv = "TXBENCH_RELAY_CHILD"

// childSpec is what the relay process drains.
type childSpec struct {
	Label      string
	DSN        string
	NameServer string
	Group      string
	Table      string
	Topic      string
	Relays     int
	BatchSize  int
	Expect     int
	CPUProfile string
	// RelayName names the relay (Relays must be 1). With Gated, the
	// child prints "ready" once its relay runs and then runs until its
	// stdin closes, and the parent measures the drain.
	RelayName string
	Gated     bool
	// Waiting: the table also holds rows not due yet, which do not count
	// as pending once the Expect rows are drained.
	Waiting bool
}

// childResult is what the relay process measured, printed as JSON on its
// stdout.
type childResult struct {
	Drained    int64   `json:"drained"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"per_s"`
	Publishes  int64   `json:"publishes"`
	PeakRSSKiB int64   `json:"peak_rss_kib"`
	HWMKiB     int64   `json:"hwm_kib"`
	CPU        cpuUse  `json:"-"` // measured by the parent
}

func relayName(spec childSpec) string {
	if spec.RelayName != "" {
		return spec.RelayName
	}
	return spec.Group
}

// noProgressLimit fails a drain that stops moving.
const noProgressLimit = 60 * time.Second

func childMain(specJSON string, stdout, stderr io.Writer) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(stderr, "txbench relay child: bad spec:", err)
		return 2
	}
	res, err := runChildRelays(context.Background(), spec, os.Stdin, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "txbench relay child %s: %v\n", spec.Label, err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

// runChildRelays starts spec.Relays relays on one publisher and measures
// the time until spec.Expect messages are acknowledged by the broker and
// no row is pending.
func runChildRelays(ctx context.Context, spec childSpec, stdin io.Reader, stdout, stderr io.Writer) (*childResult, error) {
	rlog.SetLogLevel("error")
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pr := newProgress(stderr)
	db, err := openPool(spec.DSN, spec.Relays+4)
	if err != nil {
		return nil, err
	}
	defer func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	}()
	// The background part of a local-table stack: spec.Relays relays on
	// one publisher. The relays' hook counts what the broker acknowledged.
	counter := &ackCounter{}
	st, err := stack.Outbox(db, stack.OutboxConfig{
		Config: stack.Config{
			RocketMQ: txrmq.Conn{NameServers: []string{spec.NameServer}}, Group: spec.Group,
			Topics: []string{spec.Topic},
			Parts:  stack.PartBackground,
			Logger: log,
			Hooks:  txmsg.Hooks{counter},
		},
		Outbox: outbox.Config{Table: spec.Table},
		Relay:  outbox.RelayConfig{Name: relayName(spec), BatchSize: spec.BatchSize},
		Relays: spec.Relays,
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = st.Close(context.Background()) }()
	// The publisher first, with one message alone, so the timed drain
	// starts with connected clients and known routes (concurrent first
	// sends to a topic can fail with "route info not found" in the client,
	// and their rows would back off for a second). The stack's Start does
	// not start it again.
	if err := st.Publisher().Start(ctx); err != nil {
		return nil, err
	}
	if err := warmPublisher(ctx, st.Publisher(), spec.Topic); err != nil {
		return nil, err
	}

	var peak atomic.Int64
	sample := func() {
		if k, err := procStatusKiB("VmRSS"); err == nil && k > peak.Load() {
			peak.Store(k)
		}
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			sample()
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	}()
	defer func() { stopSampling(); sampler.Wait() }()

	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}

	t0 := time.Now()
	if err := st.Start(ctx); err != nil {
		return nil, err
	}
	if spec.Gated {
		fmt.Fprintln(stdout, "ready")
		_, _ = io.Copy(io.Discard, stdin)
		return &childResult{Drained: counter.acked.Load(), Publishes: counter.calls.Load()}, nil
	}
	stopProgress := pr.ticker(spec.Label, func() string {
		return fmt.Sprintf("relay drained %d/%d, rss %.1f MiB", counter.acked.Load(), spec.Expect, kib2mib(peak.Load()))
	}, counter.acked.Load)
	defer stopProgress()

	// Wait for the acknowledgements, then for the last marks to commit.
	last, lastMove := int64(-1), time.Now()
	for {
		n := counter.acked.Load()
		if n >= int64(spec.Expect) {
			break
		}
		if n != last {
			last, lastMove = n, time.Now()
		} else if time.Since(lastMove) > noProgressLimit {
			return nil, fmt.Errorf("drain stalled at %d of %d messages for %s", n, spec.Expect, noProgressLimit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for {
		var pending int64
		q := db.WithContext(ctx).Table(spec.Table).Where("status = ?", outbox.StatusPending)
		if spec.Waiting {
			// The claim's own range: the rows due now.
			q = q.Where("next_attempt_at <= UTC_TIMESTAMP(6)")
		}
		err := q.Count(&pending).Error
		if err != nil {
			return nil, err
		}
		if pending == 0 {
			break
		}
		if time.Since(t0) > time.Hour {
			return nil, fmt.Errorf("%d rows still pending", pending)
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	sample()
	hwm, _ := procStatusKiB("VmHWM")
	drained := counter.acked.Load()
	return &childResult{
		Drained:    drained,
		Seconds:    elapsed.Seconds(),
		PerSecond:  float64(drained) / elapsed.Seconds(),
		Publishes:  counter.calls.Load(),
		PeakRSSKiB: peak.Load(),
		HWMKiB:     hwm,
	}, nil
}

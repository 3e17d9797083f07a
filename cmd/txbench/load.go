package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// op is one operation of a closed-loop phase. seq numbers the calls of one
// phase from 0, warm-up included.
type op func(ctx context.Context, seq int64) error

// loadSpec is a closed-loop phase: workers run op back to back, first for
// warmup (not measured), then for duration, or for exactly count
// operations when count > 0.
type loadSpec struct {
	name     string
	workers  int
	warmup   time.Duration
	duration time.Duration
	count    int
}

// loadResult is what a closed-loop phase measured.
type loadResult struct {
	ops     int64         // operations that succeeded in the measured window
	errs    int64         // operations that failed in the measured window
	elapsed time.Duration // length of the measured window
	lat     latencies     // of the measured successful operations
	cpu     cpuUse        // who used the CPU in the measured window
	firstEr error
}

func (r loadResult) perSecond() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

const (
	stateWarm int32 = iota
	stateMeasure
	stateStop
)

// closedLoop runs spec. Only operations that start and end inside the
// measured window count, so the warm-up and the tail do not blur the rate.
func closedLoop(ctx context.Context, pr *progress, spec loadSpec, fn op) (loadResult, error) {
	var (
		state   atomic.Int32
		seq     atomic.Int64
		issued  atomic.Int64 // measured operations started, count mode
		done    atomic.Int64 // all successful operations, for progress
		mu      sync.Mutex
		res     loadResult
		startAt time.Time
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	finished := make(chan struct{})
	var finishOnce sync.Once
	finish := func() { finishOnce.Do(func() { close(finished) }) }

	for range spec.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var ok, bad int64
			var firstEr error
			defer func() {
				mu.Lock()
				res.ops += ok
				res.errs += bad
				res.lat = append(res.lat, lat...)
				if res.firstEr == nil {
					res.firstEr = firstEr
				}
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				st := state.Load()
				if st == stateStop {
					return
				}
				if st == stateMeasure && spec.count > 0 {
					if n := issued.Add(1); n > int64(spec.count) {
						finish()
						return
					}
				}
				t0 := time.Now()
				err := fn(ctx, seq.Add(1)-1)
				d := time.Since(t0)
				if err == nil {
					done.Add(1)
				}
				if st != stateMeasure || (spec.count == 0 && state.Load() != stateMeasure) {
					continue
				}
				if err != nil {
					bad++
					if firstEr == nil && ctx.Err() == nil {
						firstEr = err
					}
					continue
				}
				ok++
				lat = append(lat, d)
			}
		}()
	}

	stopProgress := pr.ticker(spec.name, func() string {
		phase := "measure"
		if state.Load() == stateWarm {
			phase = "warm-up"
		}
		return fmt.Sprintf("%s ops=%d", phase, done.Load())
	}, done.Load)

	if spec.warmup > 0 {
		sleepCtx(ctx, spec.warmup)
	}
	cpu0 := cpuStart()
	startAt = time.Now()
	state.Store(stateMeasure)
	var endAt time.Time
	if spec.count > 0 {
		select {
		case <-ctx.Done():
		case <-finished:
		}
		state.Store(stateStop)
		wg.Wait()
		endAt = time.Now()
	} else {
		sleepCtx(ctx, spec.duration)
		endAt = time.Now()
		state.Store(stateStop)
		wg.Wait()
	}
	res.cpu = cpu0.stop(0)
	stopProgress()
	res.elapsed = endAt.Sub(startAt)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if res.ops == 0 {
		return res, fmt.Errorf("%s: no operation succeeded: %v", spec.name, res.firstEr)
	}
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// latencies is a set of measured durations.
type latencies []time.Duration

// pct returns the p-th percentile (0 < p ≤ 100) in milliseconds, nearest
// rank; 0 when empty.
func (l latencies) pct(p float64) float64 {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	i = max(0, min(i, len(s)-1))
	return ms(s[i])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// progress writes one-line progress reports to stderr.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newProgress(w io.Writer) *progress { return &progress{w: w, start: time.Now()} }

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[txbench %6.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// ticker reports status() and the rate of counter every second until the
// returned stop is called.
func (p *progress) ticker(name string, status func() string, counter func() int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, lastAt := counter(), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				n := counter()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				p.printf("%-4s %s  %.0f/s", name, status(), rate)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

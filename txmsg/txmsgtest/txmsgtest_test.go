package txmsgtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/txmsg/txmsg/txmsg"
)

// The suite's own tests: an in-memory Publisher that keeps the contract
// passes RunPublisher, and each way of breaking the contract fails the
// case that is about it. They check the suite, not a broker: the real
// Publisher runs the suite in adapters/txrmq.

// memPublisher delivers to rec at once. Bodies over maxBody are refused
// "by the broker"; away makes every publish fail as a broker that does
// not answer would. The other fields break the contract on purpose.
type memPublisher struct {
	rec     *Recorder
	maxBody int
	away    bool

	wholeCall    bool  // one failed message fails the whole call
	awayErr      error // what a publish fails with while away
	refusedErr   error // what a refused message fails with
	deliverTwice bool
}

func (p *memPublisher) Publish(ctx context.Context, msgs ...*txmsg.Message) error {
	errs := make([]error, len(msgs))
	failed := 0
	for i, m := range msgs {
		switch err := m.Validate(2 * p.maxBody); {
		case err != nil:
			errs[i] = err
		case p.away:
			errs[i] = p.awayErr
		case len(m.Body) > p.maxBody:
			errs[i] = p.refusedErr
		}
		if errs[i] != nil {
			failed++
		}
	}
	if failed > 0 && p.wholeCall {
		return fmt.Errorf("publish: %w", errors.Join(errs...))
	}
	for i, m := range msgs {
		if errs[i] == nil {
			p.rec.Record(m.Clone())
			if p.deliverTwice {
				p.rec.Record(m.Clone())
			}
		}
	}
	switch {
	case failed == 0:
		return nil
	case failed == len(msgs) && len(msgs) == 1:
		return errs[0]
	default:
		return &txmsg.BatchError{Errs: errs}
	}
}

// memEnv is an environment whose Publisher keeps the contract; broken
// changes it.
func memEnv(broken func(p *memPublisher)) PublisherEnv {
	rec := &Recorder{}
	good := func() *memPublisher {
		p := &memPublisher{rec: rec, maxBody: 1 << 10,
			awayErr:    fmt.Errorf("%w: dial: connection refused", txmsg.ErrUnavailable),
			refusedErr: fmt.Errorf("%w: message too large", txmsg.ErrRejected)}
		if broken != nil {
			broken(p)
		}
		return p
	}
	return PublisherEnv{
		Publisher: good(),
		Topic:     "txmsgtest_topic",
		Observer:  rec,
		Unavailable: func(testing.TB) txmsg.Publisher {
			p := good()
			p.away = true
			return p
		},
		Rejected: func(topic string) *txmsg.Message {
			return &txmsg.Message{Topic: topic, Body: []byte(strings.Repeat("x", 2<<10))}
		},
	}
}

func TestRunPublisherPassesAContractKeepingPublisher(t *testing.T) {
	RunPublisher(t, func(t *testing.T) PublisherEnv { return memEnv(nil) })
}

// fakeT records a case's failures; Fatal and Skip end the case's
// goroutine as they do a test's.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	failures []string
	skipped  bool
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

func (f *fakeT) Fatal(args ...any) {
	f.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}

func (f *fakeT) Skip(args ...any) {
	f.mu.Lock()
	f.skipped = true
	f.mu.Unlock()
	runtime.Goexit()
}

func runCase(t *testing.T, fn func(testing.TB, PublisherEnv), e PublisherEnv) *fakeT {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f, e)
	}()
	<-done
	return f
}

func TestPublisherCasesCatchBrokenContracts(t *testing.T) {
	for _, c := range []struct {
		name   string
		broken func(p *memPublisher)
		fn     func(testing.TB, PublisherEnv)
		want   string
	}{
		{"delivers twice", func(p *memPublisher) { p.deliverTwice = true }, publishDeliversOnce, "delivered 2 times"},
		{"fails the whole call for an invalid message", func(p *memPublisher) { p.wholeCall = true }, invalidFailsAlone, "*txmsg.BatchError"},
		{"fails the whole call for a refused message", func(p *memPublisher) { p.wholeCall = true }, rejectedIsNotUnavailable, "*txmsg.BatchError"},
		{"reports a refusal as the broker's", func(p *memPublisher) {
			p.refusedErr = fmt.Errorf("%w: message too large", txmsg.ErrUnavailable)
		}, rejectedIsNotUnavailable, "does not wrap"},
		{"reports an outage as a refusal", func(p *memPublisher) {
			p.awayErr = fmt.Errorf("%w: connection refused", txmsg.ErrRejected)
		}, unavailableIsNotRejected, "reads as a refusal"},
		{"reports an outage without saying so", func(p *memPublisher) {
			p.awayErr = errors.New("connection refused")
		}, unavailableIsNotRejected, "does not wrap txmsg.ErrUnavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := runCase(t, c.fn, memEnv(c.broken))
			if f.skipped {
				t.Fatal("the case skipped")
			}
			if !strings.Contains(strings.Join(f.failures, "\n"), c.want) {
				t.Fatalf("the case reported %q, want a failure saying %q", f.failures, c.want)
			}
		})
	}
}

func TestPublisherCasesSkipWithoutTheirEnvironment(t *testing.T) {
	e := memEnv(nil)
	e.Unavailable, e.Rejected = nil, nil
	for _, fn := range []func(testing.TB, PublisherEnv){unavailableIsNotRejected, rejectedIsNotUnavailable} {
		if f := runCase(t, fn, e); !f.skipped || len(f.failures) > 0 {
			t.Fatalf("skipped %v, failures %q; want a skip", f.skipped, f.failures)
		}
	}
}

func TestRecorder(t *testing.T) {
	var r Recorder
	if got := r.Delivered("a"); len(got) != 0 {
		t.Fatalf("zero Recorder delivered %v", got)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Record(&txmsg.Message{ID: "a"})
		}()
	}
	wg.Wait()
	r.Record(&txmsg.Message{ID: "b"})
	if n := len(r.Delivered("a")); n != 8 {
		t.Fatalf("%d deliveries of a, want 8", n)
	}
	if n := len(r.Delivered("b")); n != 1 {
		t.Fatalf("%d deliveries of b, want 1", n)
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// supervisor runs the child processes and restarts each one promptly
// whenever it dies, until it is stopped.
type supervisor struct {
	exe    string
	env    []string
	logDir string

	wg    sync.WaitGroup
	mu    sync.Mutex
	procs []*proc

	// counted are the log substrings counted over all children.
	counted []string
	counts  map[string]int
	races   int
	// reconciled holds the txmsg IDs a reconciler published again
	// (lines with logReconciled).
	reconciled map[string]bool
}

func newSupervisor(exe string, env []string, logDir string, counted ...string) *supervisor {
	return &supervisor{exe: exe, env: env, logDir: logDir, counted: counted, counts: map[string]int{}, reconciled: map[string]bool{}}
}

// proc is one supervised child and its incarnations.
type proc struct {
	sup  *supervisor
	name string
	spec childSpec

	mu       sync.Mutex
	cmd      *exec.Cmd
	inc      int
	ready    chan struct{} // closed when the current incarnation is ready
	exited   chan struct{} // closed when the current incarnation exits
	point    string        // the kill point the current incarnation reported
	endPoint string        // the kill point the last ended incarnation reported
	stopping bool
	hold     time.Duration // extra wait before the next restart, once
	deaths   int           // incarnations that ended other than by stop
}

// start adds a child and keeps it running.
func (s *supervisor) start(ctx context.Context, name string, spec childSpec) *proc {
	spec.Name = name
	p := &proc{sup: s, name: name, spec: spec, ready: make(chan struct{}), exited: make(chan struct{})}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); p.loop(ctx) }()
	return p
}

func (p *proc) loop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		p.mu.Lock()
		if p.stopping || ctx.Err() != nil {
			close(p.exited)
			p.mu.Unlock()
			return
		}
		p.inc++
		spec := p.spec
		spec.Incarnation = p.inc
		p.point = ""
		p.mu.Unlock()

		lived, err := p.runOnce(spec)
		if err != nil {
			fmt.Fprintf(os.Stderr, "txchaos: %s: %v\n", p.name, err)
		}

		p.mu.Lock()
		stopping := p.stopping
		if !stopping {
			p.deaths++
		}
		p.endPoint = p.point
		close(p.exited)
		p.exited = make(chan struct{})
		p.ready = make(chan struct{})
		hold := p.hold
		p.hold = 0
		p.mu.Unlock()
		if stopping {
			return
		}
		if hold > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(hold):
			}
		}
		// Prompt restarts, backing off while a child cannot even start
		// (its database or broker is down).
		if lived > 5*time.Second {
			backoff = 100 * time.Millisecond
		} else {
			backoff = min(2*backoff, 2*time.Second)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// runOnce runs one incarnation to its end.
func (p *proc) runOnce(spec childSpec) (time.Duration, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return 0, err
	}
	logFile, err := os.OpenFile(filepath.Join(p.sup.logDir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logFile.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(p.sup.exe)
	cmd.Env = append(append(os.Environ(), p.sup.env...), childEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = pw, pw
	// Children die with the supervisor, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	fmt.Fprintf(logFile, "=== %s incarnation %d starting at %s\n", p.name, spec.Incarnation, start.UTC().Format(time.RFC3339Nano))
	p.mu.Lock()
	err = cmd.Start()
	if err == nil {
		p.cmd = cmd
	}
	ready := p.ready
	p.mu.Unlock()
	_ = pw.Close()
	if err != nil {
		_ = pr.Close()
		return 0, err
	}
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	readied := false
	for sc.Scan() {
		line := sc.Text()
		_, _ = logFile.WriteString(line + "\n")
		switch {
		case line == lineReady && !readied:
			readied = true
			close(ready)
		case strings.HasPrefix(line, lineKillPoint):
			p.mu.Lock()
			p.point = strings.TrimSpace(strings.TrimPrefix(line, lineKillPoint))
			p.mu.Unlock()
		}
		p.sup.count(line)
	}
	_ = pr.Close()
	werr := cmd.Wait()
	lived := time.Since(start)
	fmt.Fprintf(logFile, "=== %s incarnation %d (pid %d) ended after %s: %v\n", p.name, spec.Incarnation, cmd.Process.Pid, lived.Round(time.Millisecond), werr)
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
	return lived, nil
}

func (s *supervisor) count(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.Contains(line, "WARNING: DATA RACE") {
		s.races++
	}
	for _, sub := range s.counted {
		if strings.Contains(line, sub) {
			s.counts[sub]++
		}
	}
	if strings.Contains(line, logReconciled) {
		if m := txmsgIDField.FindStringSubmatch(line); m != nil {
			s.reconciled[m[1]] = true
		}
	}
}

// txmsgIDField finds the txmsg_id attribute of a child's JSON log line.
var txmsgIDField = regexp.MustCompile(`"txmsg_id":"([^"]+)"`)

// reconciledIDs returns the txmsg IDs a reconciler published again.
func (s *supervisor) reconciledIDs() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, len(s.reconciled))
	for id := range s.reconciled {
		out[id] = true
	}
	return out
}

// snapshotCounts returns the substring counts and data races seen so far.
func (s *supervisor) snapshotCounts() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out, s.races
}

// incarnation returns the channels of the current incarnation.
func (p *proc) incarnation() (inc int, ready, exited <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inc, p.ready, p.exited
}

// waitReady waits until the current incarnation is ready.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		_, ready, exited := p.incarnation()
		select {
		case <-ready:
			return nil
		case <-exited:
			// it died while starting; wait for the next one
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-deadline:
			return fmt.Errorf("%s not ready after %s", p.name, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// holdRestart makes the supervisor wait d longer before restarting the
// current incarnation once it dies.
func (p *proc) holdRestart(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = d
}

// signal sends sig to the current incarnation.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return errors.New(p.name + " is not running")
	}
	return p.cmd.Process.Signal(sig)
}

// endedAt returns the kill point the last ended incarnation reported, if
// any.
func (p *proc) endedAt() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.endPoint
}

// stop ends the child for good: SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	cmd := p.cmd
	exited := p.exited
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-exited:
		return
	case <-time.After(grace):
	}
	_ = p.signal(syscall.SIGKILL)
	<-exited
}

// stopAll kills every child and waits for the supervisor loops.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for _, p := range procs {
		p.mu.Lock()
		p.stopping = true
		p.mu.Unlock()
		_ = p.signal(syscall.SIGKILL)
	}
	s.wg.Wait()
}

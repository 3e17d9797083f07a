package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Attempt records: every producer incarnation appends one JSON line before
// each transaction ("try") and one after it ("end"). Each line is a single
// write(2) on an O_APPEND file, so a SIGKILL loses at most the line not yet
// written; a "try" without an "end" is a transaction whose producer died
// under it.
const (
	evTry = "try"
	evEnd = "end"
)

// Producer-side outcomes.
const (
	outcomeCommitted  = "committed"
	outcomeRolledBack = "rolled_back"
	outcomeUnknown    = "unknown" // ErrOutcomeUnknown, or the producer died mid-transaction
)

type attemptRecord struct {
	Ev       string `json:"ev"`
	ID       string `json:"id"`
	Mode     string `json:"mode,omitempty"`
	Key      string `json:"key,omitempty"`
	Seq      int    `json:"seq,omitempty"`
	Rollback bool   `json:"rollback,omitempty"` // the business logic fails on purpose
	Outcome  string `json:"outcome,omitempty"`
	Err      string `json:"err,omitempty"`
	T        int64  `json:"t"` // Unix microseconds
}

type attemptLog struct {
	mu sync.Mutex
	f  *os.File
}

func openAttemptLog(dir, name string, incarnation int) (*attemptLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%04d.jsonl", name, incarnation))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &attemptLog{f: f}, nil
}

func (l *attemptLog) write(r attemptRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.f.Write(b)
	return err
}

func (l *attemptLog) close() { _ = l.f.Close() }

// attempt is one transaction as its producer recorded it.
type attempt struct {
	ID       string
	Mode     string
	Key      string
	Seq      int
	Rollback bool
	// Outcome is the producer-side outcome; "" when the producer died
	// before recording one.
	Outcome string
	Err     string
	// Began is when the producer began it (the "try" line); zero when that
	// line was lost.
	Began time.Time
}

// failed reports whether the client got no commit for a transaction whose
// business logic did not fail on purpose: an error, or its producer died
// under it.
func (a *attempt) failed() bool { return !a.Rollback && a.Outcome != outcomeCommitted }

// readAttempts reads every attempt record under dir.
func readAttempts(dir string) (map[string]*attempt, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	out := map[string]*attempt{}
	for _, path := range files {
		if err := readAttemptFile(path, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readAttemptFile(path string, out map[string]*attempt) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r attemptRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.ID == "" {
			continue // a line cut short by a kill
		}
		a := out[r.ID]
		if a == nil {
			a = &attempt{ID: r.ID}
			out[r.ID] = a
		}
		switch r.Ev {
		case evTry:
			a.Mode, a.Key, a.Seq, a.Rollback = r.Mode, r.Key, r.Seq, r.Rollback
			a.Began = time.UnixMicro(r.T)
		case evEnd:
			a.Outcome, a.Err = r.Outcome, r.Err
		}
	}
	return sc.Err()
}

// countAttempts counts "try" lines under dir, cheaply.
func countAttempts(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	n := 0
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if len(sc.Bytes()) > 12 && string(sc.Bytes()[:12]) == `{"ev":"try",` {
				n++
			}
		}
		_ = f.Close()
	}
	return n
}

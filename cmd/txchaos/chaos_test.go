package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
)

// TestMain lets the chaos run re-execute this test binary as its children.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	os.Exit(m.Run())
}

// infraEnv turns on the broker and database faults of TestChaosShort.
// They restart the services every other package's tests use, so `make
// test` sets it only in a step of its own, after all other tests.
const infraEnv = "TXMSG_CHAOS_INFRA"

// shortConfig is TestChaosShort's schedule: two faults of each kind, a
// light workload (the test binary and its children may be race builds).
// Relays get a new name per process, the library's default, so a relay
// killed while it asks for buckets leaves a stale ask behind (the case
// adapters/outbox's TestOrderedRelayIgnoresDeadRelaysAsk pins down).
func shortConfig() config {
	cfg := defaultConfig()
	cfg.RelayNames = relayNamesUnique
	cfg.Duration = 0
	cfg.FaultsPerKind = 2
	cfg.MinTx = 0
	cfg.Rate = 6
	cfg.Workers = 3
	cfg.Gap = 500 * time.Millisecond
	cfg.RecoveryTimeout = 45 * time.Second
	cfg.Drain = 90 * time.Second
	cfg.PauseMin, cfg.PauseMax = 4*time.Second, 5*time.Second
	return cfg
}

// TestChaosShort runs a short chaos schedule and fails on any violated
// invariant. Without TXMSG_CHAOS_INFRA=1 it injects process faults only,
// which are safe while other packages' tests share the broker and the
// database.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	testbed.RequireBroker(t)
	if err := dialDSN(testbed.DSN()); err != nil {
		if testbed.Required() {
			t.Fatalf("MySQL/MariaDB is not reachable (%v); start it with scripts/mysql.sh start", err)
		}
		t.Skipf("MySQL/MariaDB is not reachable (%v); start it with scripts/mysql.sh start", err)
	}
	cfg := shortConfig()
	cfg.Exe = os.Args[0]
	cfg.Infra = os.Getenv(infraEnv) == "1"
	if cfg.Infra {
		if why := servicesNotOwned(t); why != "" {
			// A broker or database someone else started (docker, a shared
			// dev server) is not ours to kill.
			t.Logf("broker and database faults skipped: %s", why)
			cfg.Infra = false
		}
	}
	if cfg.Infra {
		// Whatever happens, leave the services running for whoever comes
		// next.
		t.Cleanup(func() { restoreForNext(t) })
	} else {
		t.Logf("process faults only; set %s=1 (make test does, in a step of its own) for broker and database faults", infraEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out bytes.Buffer
	prog := &testWriter{t: t}
	rep, err := run(ctx, cfg, &out, prog)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.True(t, rep.OK(), "invariants violated; see the report above and %s", rep.Dir)
	s := rep.summary()
	for _, k := range (&runner{cfg: cfg}).enabledKinds() {
		require.Positive(t, s.Faults[k], "no %s fault was injected", k)
	}
	require.Positive(t, s.Committed)
	require.Zero(t, rep.DataRaces, "a child reported a data race; see the logs in %s", rep.Dir)
	_ = os.RemoveAll(rep.Dir)
}

// servicesNotOwned says why the broker or the database cannot be faulted
// (the test bed did not start them), or "".
func servicesNotOwned(t *testing.T) string {
	root, err := rmqproc.FindRoot()
	if err != nil {
		return err.Error()
	}
	// The database faults act on the test bed's own server only.
	if cfg, err := mysql.ParseDSN(testbed.DSN()); err != nil || cfg.Addr != "127.0.0.1:"+testbed.MySQLPort() {
		return "TXMSG_DSN names a server scripts/mysql.sh did not start"
	}
	if !testbed.LocalBroker(t).Owns("") {
		return "the test bed did not start the running broker"
	}
	if err := exec.Command(filepath.Join(root, "scripts", "mysql.sh"), "owns").Run(); err != nil {
		return "scripts/mysql.sh did not start the running database"
	}
	return ""
}

func dialDSN(dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", cfg.Addr, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func restoreForNext(t *testing.T) {
	root, err := rmqproc.FindRoot()
	if err != nil {
		t.Error(err)
		return
	}
	rmq := testbed.LocalBroker(t)
	_ = rmq.Resume("")
	if err := rmq.Start(context.Background(), ""); err != nil {
		t.Errorf("start the broker again: %v", err)
	}
	if out, err := exec.Command(filepath.Join(root, "scripts", "mysql.sh"), "start").CombinedOutput(); err != nil {
		t.Errorf("scripts/mysql.sh start: %v\n%s", err, out)
	}
}

// testWriter logs each line written to it.
type testWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.t.Log(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// TestEvaluateFindsEachViolation feeds the checker a final state with one
// violation of each kind, so a run that reports zero is not zero by
// construction.
func TestEvaluateFindsEachViolation(t *testing.T) {
	t.Parallel()
	ok := func(id, mode, key string, seq int) (*attempt, orderRow) {
		return &attempt{ID: id, Mode: mode, Key: key, Seq: seq, Outcome: outcomeCommitted},
			orderRow{ID: id, Mode: mode, ShardKey: key, Seq: seq}
	}
	s := &snapshot{
		Attempts: map[string]*attempt{}, Orders: map[string]orderRow{}, Barrier: map[string]string{},
		Outbox: map[string]outbox.Status{}, Stored: map[string][]storedMsg{}, StoredComplete: true,
	}
	add := func(id, mode, key string, seq int) {
		a, o := ok(id, mode, key, seq)
		s.Attempts[id], s.Orders[id] = a, o
		s.Effects = append(s.Effects, effectRow{MsgID: id, Mode: mode, ShardKey: key, Seq: seq})
		if mode == modeTx {
			s.Barrier[id] = checker.StateCommitted
			s.Stored[modeTx] = append(s.Stored[modeTx], storedMsg{ID: id, Key: key, Seq: seq})
		} else {
			s.Outbox[id] = outbox.StatusSent
			s.Stored[modeOutbox] = append(s.Stored[modeOutbox], storedMsg{ID: id, Key: key, Seq: seq, Offset: int64(len(s.Stored[modeOutbox]))})
		}
	}
	add("t1", modeTx, "k", 1)
	add("o1", modeOutbox, "a", 1)
	add("o2", modeOutbox, "a", 2)
	clean := evaluate(s)
	require.Zero(t, clean.violations(), clean.Examples)
	require.Equal(t, 3, clean.Modes[modeTx].Attempted+clean.Modes[modeOutbox].Attempted)

	// I1: a committed order whose effect is missing.
	add("t2", modeTx, "k", 2)
	s.Effects = s.Effects[:len(s.Effects)-1]
	// I2: an effect of a rolled-back attempt.
	s.Attempts["t3"] = &attempt{ID: "t3", Mode: modeTx, Outcome: outcomeRolledBack}
	s.Effects = append(s.Effects, effectRow{MsgID: "t3", Mode: modeTx})
	// I3: a second effect.
	s.Effects = append(s.Effects, effectRow{MsgID: "t1", Mode: modeTx})
	// I4: the broker stored an event its barrier rolled back.
	s.Barrier["t4"] = checker.StateRolledBack
	s.Stored[modeTx] = append(s.Stored[modeTx], storedMsg{ID: "t4"})
	// I5: key b's seq 1 stored after its seq 2.
	add("o3", modeOutbox, "b", 2)
	add("o4", modeOutbox, "b", 1)
	// I5 at the handler: key d stored in order, handled 2 before 1.
	add("o6", modeOutbox, "d", 1)
	add("o7", modeOutbox, "d", 2)
	n := len(s.Effects)
	s.Effects[n-2], s.Effects[n-1] = s.Effects[n-1], s.Effects[n-2]
	// I6: a pending outbox row (its order committed and handled).
	add("o5", modeOutbox, "c", 1)
	s.Outbox["o5"] = outbox.StatusPending
	// I6: a parked outbox row.
	add("o8", modeOutbox, "e", 1)
	s.Outbox["o8"] = outbox.StatusParked
	// Outcome: reported committed, no order row.
	s.Attempts["t5"] = &attempt{ID: "t5", Mode: modeTx, Outcome: outcomeCommitted}

	v := evaluate(s)
	require.Equal(t, 1, v.Lost, v.Examples)
	require.Equal(t, 1, v.Phantom, v.Examples)
	require.Equal(t, 1, v.DuplicateEffects, v.Examples)
	require.Equal(t, 1, v.Disagreements, v.Examples)
	require.Equal(t, 1, v.OrderViolations, v.Examples)
	require.Equal(t, 2, v.HandlerInversions, "keys b and d", v.Examples)
	require.Equal(t, 1, v.Pending, v.Examples)
	require.Equal(t, 1, v.Parked, v.Examples)
	require.Equal(t, 1, v.OutcomeMismatches, v.Examples)
	require.True(t, strings.Contains(strings.Join(v.Examples, "\n"), "I5 key b"), v.Examples)
	require.True(t, strings.Contains(strings.Join(v.Examples, "\n"), "I5 handler: key d seq 1 handled after seq 2"), v.Examples)
}

// TestEvaluateDelayed: a delayed event received before its due time (on
// any delivery) is D1, one first handled later than the bound after it is
// D2; on-time events, a receipt within the due time's millisecond and
// events without a delay are neither, and the lateness of the first
// handling is measured.
func TestEvaluateDelayed(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := &snapshot{
		Attempts: map[string]*attempt{}, Orders: map[string]orderRow{}, Barrier: map[string]string{},
		Outbox: map[string]outbox.Status{}, Stored: map[string][]storedMsg{}, StoredComplete: true,
		LateBound: time.Minute,
	}
	add := func(id string, late time.Duration, delayed bool) {
		s.Attempts[id] = &attempt{ID: id, Mode: modeOutbox, Key: id, Seq: 1, Outcome: outcomeCommitted}
		s.Orders[id] = orderRow{ID: id, Mode: modeOutbox, ShardKey: id, Seq: 1}
		s.Outbox[id] = outbox.StatusSent
		s.Stored[modeOutbox] = append(s.Stored[modeOutbox], storedMsg{ID: id, Key: id, Seq: 1})
		e := effectRow{MsgID: id, Mode: modeOutbox, ShardKey: id, Seq: 1, ReceivedAt: due.Add(late)}
		if delayed {
			d := due
			e.DueAt = &d
		}
		s.Effects = append(s.Effects, e)
	}
	add("on-time", 20*time.Millisecond, true)
	add("same-ms", -500*time.Microsecond, true)
	add("late-ok", 59*time.Second, true)
	add("plain", -time.Hour, false)
	clean := evaluate(s)
	require.Zero(t, clean.violations(), clean.Examples)
	require.Equal(t, 3, clean.Delayed)
	require.InDelta(t, 20, clean.DelayedLateP50, 0.001)
	require.InDelta(t, 59000, clean.DelayedLateMax, 0.001)

	add("early", -10*time.Millisecond, true)
	add("too-late", 61*time.Second, true)
	v := evaluate(s)
	require.Equal(t, 1, v.Early, v.Examples)
	require.Equal(t, 1, v.LateDelayed, v.Examples)
	require.Equal(t, 2, v.violations(), v.Examples)
	examples := strings.Join(v.Examples, "\n")
	require.Contains(t, examples, "D1 early: outbox event early")
	require.Contains(t, examples, "D2 late: delayed event too-late")

	// An early redelivery counts even when the first handling was on
	// time; lateness is the first handling's.
	s = &snapshot{Attempts: s.Attempts, Orders: s.Orders, Barrier: s.Barrier, Outbox: s.Outbox, Stored: s.Stored, StoredComplete: true}
	d := due
	s.Effects = []effectRow{
		{MsgID: "on-time", Mode: modeOutbox, ShardKey: "on-time", Seq: 1, ReceivedAt: due.Add(time.Second), DueAt: &d},
		{MsgID: "on-time", Mode: modeOutbox, ShardKey: "on-time", Seq: 1, ReceivedAt: due.Add(-time.Second), DueAt: &d},
	}
	v = evaluate(s)
	require.Equal(t, 1, v.Early, v.Examples)
	require.Zero(t, v.LateDelayed, "no bound: D2 unchecked")
	require.InDelta(t, 1000, v.DelayedLateMax, 0.001)
}

// TestKeyMovedBetweenBrokersIsCountedApart: on a cluster, an ordered key
// whose broker died is re-hashed to the other broker; an event the dead
// broker stored just before is handled when it returns, after the key's
// later events. The checker counts that apart (informational), and still
// counts a key that stayed on one broker.
func TestKeyMovedBetweenBrokersIsCountedApart(t *testing.T) {
	t.Parallel()
	s := &snapshot{
		Attempts: map[string]*attempt{}, Orders: map[string]orderRow{}, Barrier: map[string]string{},
		Outbox: map[string]outbox.Status{}, Stored: map[string][]storedMsg{}, StoredComplete: true,
	}
	add := func(id, key string, seq int, broker string) {
		s.Attempts[id] = &attempt{ID: id, Mode: modeOutbox, Key: key, Seq: seq, Outcome: outcomeCommitted}
		s.Orders[id] = orderRow{ID: id, Mode: modeOutbox, ShardKey: key, Seq: seq}
		s.Outbox[id] = outbox.StatusSent
		s.Stored[modeOutbox] = append(s.Stored[modeOutbox], storedMsg{ID: id, Key: key, Seq: seq, Broker: broker,
			Offset: int64(len(s.Stored[modeOutbox]))})
	}
	handle := func(ids ...string) {
		for _, id := range ids {
			o := s.Orders[id]
			s.Effects = append(s.Effects, effectRow{MsgID: id, Mode: modeOutbox, ShardKey: o.ShardKey, Seq: o.Seq})
		}
	}
	// Key m: seq 1 on broker-a, which dies; seq 2 and 3 on broker-b,
	// handled before broker-a returns with seq 1.
	add("m1", "m", 1, "broker-a")
	add("m2", "m", 2, "broker-b")
	add("m3", "m", 3, "broker-b")
	// Key s stays on broker-a and is handled out of order: a violation.
	add("s1", "s", 1, "broker-a")
	add("s2", "s", 2, "broker-a")
	handle("m2", "m3", "m1", "s2", "s1")
	v := evaluate(s)
	require.Equal(t, 1, v.KeysMovedBroker, v.Examples)
	require.Equal(t, 1, v.MovedKeyInversions, v.Examples)
	require.Equal(t, 1, v.HandlerInversions, "key s only", v.Examples)
	require.Zero(t, v.OrderViolations, v.Examples)
	require.Equal(t, 1, v.violations(), v.Examples)
}

// TestReconciledEventIsCountedApart: an ordered event that a failover
// lost and a reconciler published again is stored and handled after its
// key's later events; it is left out of the I5 checks and counted, while
// the same order without the reconciler's record is a violation.
func TestReconciledEventIsCountedApart(t *testing.T) {
	t.Parallel()
	build := func(reconciled map[string]bool) *snapshot {
		s := &snapshot{
			Attempts: map[string]*attempt{}, Orders: map[string]orderRow{}, Barrier: map[string]string{},
			Outbox: map[string]outbox.Status{}, Stored: map[string][]storedMsg{}, StoredComplete: true,
			Reconciled: reconciled,
		}
		for _, seq := range []int{1, 3, 2} { // seq 2 stored again, after 3
			id := fmt.Sprintf("k%d", seq)
			s.Attempts[id] = &attempt{ID: id, Mode: modeOutbox, Key: "k", Seq: seq, Outcome: outcomeCommitted}
			s.Orders[id] = orderRow{ID: id, Mode: modeOutbox, ShardKey: "k", Seq: seq}
			s.Outbox[id] = outbox.StatusSent
			s.Stored[modeOutbox] = append(s.Stored[modeOutbox], storedMsg{ID: id, Key: "k", Seq: seq, Broker: "broker-a",
				Offset: int64(len(s.Stored[modeOutbox]))})
			s.Effects = append(s.Effects, effectRow{MsgID: id, Mode: modeOutbox, ShardKey: "k", Seq: seq})
		}
		return s
	}
	v := evaluate(build(map[string]bool{"k2": true}))
	require.Zero(t, v.violations(), v.Examples)
	require.Equal(t, 1, v.ReconciledOrdered)
	v = evaluate(build(nil))
	require.Equal(t, 1, v.OrderViolations, v.Examples)
	require.Equal(t, 1, v.HandlerInversions, v.Examples)
}

// TestDBOutageOutlastsConsumerRetries: the db-long-outage fault keeps the
// database down for longer than both consumers' retry budgets, and only
// with TXMSG_CHAOS_INFRA.
func TestDBOutageOutlastsConsumerRetries(t *testing.T) {
	require.Equal(t, 15*time.Second, consumerRetryBudget())
	require.Equal(t, 12500*time.Millisecond, orderedRetryBudget())
	require.Greater(t, dbOutageFor(0), consumerRetryBudget())
	require.Greater(t, dbOutageFor(0), orderedRetryBudget())
	require.Contains(t, allKinds, kindDBOutage)
	require.True(t, infraKinds[kindDBOutage])
	r := &runner{cfg: config{Kinds: []string{kindDBOutage}}}
	require.False(t, r.touchesDB(), "never without TXMSG_CHAOS_INFRA")
	r.cfg.Infra = true
	require.True(t, r.touchesDB())
}

// TestBrokerOutageOutlastsRelayRetries: the broker-long-outage fault keeps
// the broker down for longer than the relays would retry a row that counts
// attempts, whatever its jitter, and only runs with the infrastructure
// faults.
func TestBrokerOutageOutlastsRelayRetries(t *testing.T) {
	t.Parallel()
	require.Greater(t, brokerOutageFor(0), time.Duration(relayMaxAttempts)*relayMaxBackoff)
	require.Contains(t, allKinds, kindBrokerOutage)
	require.True(t, infraKinds[kindBrokerOutage])
	r := &runner{cfg: config{Infra: false}}
	require.NotContains(t, r.enabledKinds(), kindBrokerOutage, "never without TXMSG_CHAOS_INFRA")
	r.cfg.Infra = true
	require.Contains(t, r.enabledKinds(), kindBrokerOutage)
}

// TestHAKindsOnlyOnTheHAForm: the HA form's fault kinds run only with -ha
// (and so with the infrastructure faults), and -ha refuses to run without
// those.
func TestHAKindsOnlyOnTheHAForm(t *testing.T) {
	r := &runner{cfg: config{Infra: true}}
	for _, k := range haKindList {
		require.Contains(t, allKinds, k)
		require.True(t, infraKinds[k])
		require.NotContains(t, r.enabledKinds(), k, "never without -ha")
	}
	r.cfg.HA = "async"
	for _, k := range haKindList {
		if controllerKinds[k] {
			require.NotContains(t, r.enabledKinds(), k, "only on the controller form")
		} else {
			require.Contains(t, r.enabledKinds(), k)
		}
	}
	r.cfg.HA = "controller"
	for _, k := range haKindList {
		if byHandKinds[k] {
			require.NotContains(t, r.enabledKinds(), k, "a failover by hand: not on the controller form")
		} else {
			require.Contains(t, r.enabledKinds(), k)
		}
	}
	require.Contains(t, r.enabledKinds(), kindMasterPauseElection)
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"-ha", "-infra=false"}, &stderr)
	require.Error(t, err)
	require.Contains(t, stderr.String(), "-ha needs -infra")
}

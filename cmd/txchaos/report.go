package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// report is the outcome of a run.
type report struct {
	RunID string
	Seed  int64
	Dir   string

	Verdict       *verdict
	Faults        []faultRecord
	FaultTime     time.Duration
	Drained       bool
	DrainTime     time.Duration
	AuditComplete bool

	// CheckBacks counts the check-back answers by state.
	CheckBacks map[string]int
	// SweptCommitted and SweptRolledBack count the discarded half messages
	// the sweeper republished and dropped.
	SweptCommitted, SweptRolledBack int
	// Reconciled counts the lost events the reconcilers published again
	// (each reconciling process counts its own).
	Reconciled int
	// Restarts counts process deaths the supervisor restarted.
	Restarts int
	// DataRaces counts race reports in the children's output (race
	// builds only).
	DataRaces int
	Elapsed   time.Duration
}

// OK reports whether no invariant was violated and everything drained.
func (r *report) OK() bool {
	return r.Verdict != nil && r.Verdict.violations() == 0 && r.Drained && r.AuditComplete
}

// faultCounts counts the faults injected without error, by kind.
func (r *report) faultCounts() map[string]int {
	out := map[string]int{}
	for _, f := range r.Faults {
		if f.Err == "" {
			out[f.Kind]++
		}
	}
	return out
}

// maxRecovery returns the longest recovery and its fault.
func (r *report) maxRecovery() (time.Duration, *faultRecord) {
	var worst *faultRecord
	for i := range r.Faults {
		f := &r.Faults[i]
		if f.Err == "" && (worst == nil || f.Recovery > worst.Recovery) {
			worst = f
		}
	}
	if worst == nil {
		return 0, nil
	}
	return worst.Recovery, worst
}

func (r *report) totals() modeCounts {
	var t modeCounts
	for _, c := range r.Verdict.Modes {
		t.Attempted += c.Attempted
		t.Committed += c.Committed
		t.RolledBack += c.RolledBack
		t.Unknown += c.Unknown
		t.UnknownCommitted += c.UnknownCommitted
	}
	return t
}

// summary is the report's final JSON line.
type summary struct {
	Attempted         int            `json:"attempted"`
	Committed         int            `json:"committed"`
	RolledBack        int            `json:"rolled_back"`
	Unknown           int            `json:"unknown"`
	UnknownCommitted  int            `json:"unknown_committed"`
	Faults            map[string]int `json:"faults"`
	FaultsTotal       int            `json:"faults_total"`
	Lost              int            `json:"lost"`
	Phantom           int            `json:"phantom"`
	DuplicateEffects  int            `json:"duplicate_effects"`
	Disagreements     int            `json:"disagreements"`
	OrderViolations   int            `json:"order_violations"`
	HandlerInversions int            `json:"handler_inversions"`
	Pending           int            `json:"pending"`
	Parked            int            `json:"parked"`
	OutcomeMismatches int            `json:"outcome_mismatches"`
	Unrecorded        int            `json:"unrecorded"`
	DelayedEarly      int            `json:"delayed_early"`
	DelayedLate       int            `json:"delayed_late"`
	DelayedHandled    int            `json:"delayed_handled"`
	DelayedLateP50MS  float64        `json:"delayed_late_p50_ms"`
	DelayedLateP99MS  float64        `json:"delayed_late_p99_ms"`
	DelayedLateMaxMS  float64        `json:"delayed_late_max_ms"`
	Drained           bool           `json:"drained"`
	MaxRecoveryMS     int64          `json:"max_recovery_ms"`
	MaxRecoveryKind   string         `json:"max_recovery_kind,omitempty"`
	// BrokerRestartFreshMaxMS and BrokerRestartRecoveryMaxMS are the worst
	// fresh-work and full recovery after broker-kill-restart, from the
	// moment the restarted broker takes messages again.
	BrokerRestartFreshMaxMS    int64 `json:"broker_restart_fresh_max_ms"`
	BrokerRestartRecoveryMaxMS int64 `json:"broker_restart_recovery_max_ms"`
	Unrecovered                int   `json:"unrecovered"`
	DrainMS                    int64 `json:"drain_ms"`
	BrokerExtraCopies          int   `json:"broker_extra_copies"`
	KeysMovedBroker            int   `json:"keys_moved_broker,omitempty"`
	ReconciledOrdered          int   `json:"reconciled_ordered,omitempty"`
	MovedKeyInversions         int   `json:"moved_key_inversions,omitempty"`
	SweptCommitted             int   `json:"swept_committed"`
	SweeperOnly                int   `json:"sweeper_only"`
	Reconciled                 int   `json:"reconciled"`
	// FaultFailed and FaultAttempted, by fault kind: the transactions
	// begun during a fault and its recovery, and those the client got no
	// commit for (faultRecord.Failed).
	FaultFailed    map[string]int `json:"fault_failed"`
	FaultAttempted map[string]int `json:"fault_attempted"`
	Restarts       int            `json:"restarts"`
	DataRaces      int            `json:"data_races"`
	ElapsedS       int64          `json:"elapsed_s"`
	OK             bool           `json:"ok"`
}

func (r *report) summary() summary {
	t := r.totals()
	v := r.Verdict
	s := summary{
		Attempted: t.Attempted, Committed: t.Committed, RolledBack: t.RolledBack,
		Unknown: t.Unknown, UnknownCommitted: t.UnknownCommitted,
		Faults: r.faultCounts(), Lost: v.Lost, Phantom: v.Phantom, DuplicateEffects: v.DuplicateEffects,
		Disagreements: v.Disagreements, OrderViolations: v.OrderViolations, HandlerInversions: v.HandlerInversions, Pending: v.Pending, Parked: v.Parked,
		OutcomeMismatches: v.OutcomeMismatches, Unrecorded: v.Unrecorded, Drained: r.Drained,
		DelayedEarly: v.Early, DelayedLate: v.LateDelayed, DelayedHandled: v.Delayed,
		DelayedLateP50MS: v.DelayedLateP50, DelayedLateP99MS: v.DelayedLateP99, DelayedLateMaxMS: v.DelayedLateMax,
		DrainMS: r.DrainTime.Milliseconds(), BrokerExtraCopies: v.BrokerCopies, KeysMovedBroker: v.KeysMovedBroker, ReconciledOrdered: v.ReconciledOrdered, MovedKeyInversions: v.MovedKeyInversions, SweptCommitted: r.SweptCommitted,
		SweeperOnly: v.SweeperOnly, Reconciled: r.Reconciled,
		FaultFailed: map[string]int{}, FaultAttempted: map[string]int{},
		Restarts: r.Restarts, DataRaces: r.DataRaces, ElapsedS: int64(r.Elapsed.Seconds()), OK: r.OK(),
	}
	for _, n := range s.Faults {
		s.FaultsTotal += n
	}
	if d, f := r.maxRecovery(); f != nil {
		s.MaxRecoveryMS, s.MaxRecoveryKind = d.Milliseconds(), f.Kind
	}
	for _, f := range r.Faults {
		if f.Err == "" {
			s.FaultFailed[f.Kind] += f.Failed
			s.FaultAttempted[f.Kind] += f.Attempted
		}
		if f.Unrecovered {
			s.Unrecovered++
		}
		if f.Kind == kindBrokerKill && f.Err == "" && !f.Unrecovered {
			s.BrokerRestartFreshMaxMS = max(s.BrokerRestartFreshMaxMS, f.Fresh.Milliseconds())
			s.BrokerRestartRecoveryMaxMS = max(s.BrokerRestartRecoveryMaxMS, f.Recovery.Milliseconds())
		}
	}
	return s
}

// write prints the report; its last line is the JSON summary.
func (r *report) write(w io.Writer) {
	v := r.Verdict
	fmt.Fprintf(w, "\ntxchaos run %s (seed %d), %s; logs and attempt records in %s\n\n", r.RunID, r.Seed, r.Elapsed.Round(time.Second), r.Dir)
	fmt.Fprintf(w, "%-8s %10s %10s %12s %8s %18s\n", "mode", "attempted", "committed", "rolled back", "unknown", "unknown→committed")
	names := make([]string, 0, len(v.Modes))
	for m := range v.Modes {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		c := v.Modes[m]
		fmt.Fprintf(w, "%-8s %10d %10d %12d %8d %18d\n", m, c.Attempted, c.Committed, c.RolledBack, c.Unknown, c.UnknownCommitted)
	}
	t := r.totals()
	fmt.Fprintf(w, "%-8s %10d %10d %12d %8d %18d\n\n", "total", t.Attempted, t.Committed, t.RolledBack, t.Unknown, t.UnknownCommitted)

	fmt.Fprintf(w, "faults over %s. Outage: fault start to end (process dead, service back). Fresh: from the end until\n", r.FaultTime.Round(time.Second))
	fmt.Fprintf(w, "transactions begun after it are handled in both modes. Recovery: until, besides, every order committed\n")
	fmt.Fprintf(w, "before the end is handled.\n")
	fmt.Fprintf(w, "Failed: of the transactions begun from the start to the recovery, those the\n")
	fmt.Fprintf(w, "client got no commit for (an error, or its producer died; rollbacks on purpose not counted).\n")
	fmt.Fprintf(w, "%-28s %5s %10s %10s %10s %10s %8s %16s\n", "kind", "count", "outage max", "fresh max", "recov p50", "recov max", "unrecov", "failed/begun")
	byKind := map[string][]faultRecord{}
	for _, f := range r.Faults {
		if f.Err == "" {
			byKind[f.Kind] = append(byKind[f.Kind], f)
		}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fs := byKind[k]
		var rec []time.Duration
		var outage, fresh time.Duration
		unrec, attempted, failed := 0, 0, 0
		for _, f := range fs {
			attempted += f.Attempted
			failed += f.Failed
			outage = max(outage, f.End.Sub(f.Start))
			fresh = max(fresh, f.Fresh)
			if f.Unrecovered {
				unrec++
			} else {
				rec = append(rec, f.Recovery)
			}
		}
		sort.Slice(rec, func(i, j int) bool { return rec[i] < rec[j] })
		p50, worst := "-", "-"
		if len(rec) > 0 {
			p50, worst = secs(rec[len(rec)/2]), secs(rec[len(rec)-1])
		}
		fmt.Fprintf(w, "%-28s %5d %10s %10s %10s %10s %8d %16s\n", k, len(fs), secs(outage), secs(fresh), p50, worst, unrec,
			fmt.Sprintf("%d/%d", failed, attempted))
	}
	for _, f := range r.Faults {
		if f.Err != "" {
			fmt.Fprintf(w, "  fault %d %s failed: %s\n", f.N, f.Kind, f.Err)
		}
	}
	fmt.Fprintf(w, "\ncheck-backs answered: %d committed, %d rolled back, %d unknown; sweeper: %d republished (%d events stored only by it), %d dropped\n",
		r.CheckBacks["committed"], r.CheckBacks["rolled_back"], r.CheckBacks["unknown"], r.SweptCommitted, v.SweeperOnly, r.SweptRolledBack)
	if r.Reconciled > 0 {
		fmt.Fprintf(w, "reconcilers: %d lost events published again (each reconciling process counts its own)\n", r.Reconciled)
	}
	fmt.Fprintf(w, "process restarts: %d; broker extra copies (dropped by the inbox): %d; tx-mode handler order inversions (concurrent consumer, informational): %d\n",
		r.Restarts, v.BrokerCopies, v.ConsumerOrderInversions)
	if v.ReconciledOrdered > 0 {
		fmt.Fprintf(w, "ordered events a reconciler published again, after their keys' later events (left out of the I5 checks): %d\n", v.ReconciledOrdered)
	}
	if v.KeysMovedBroker > 0 {
		fmt.Fprintf(w, "ordered keys stored on both brokers (fail-over re-hashed them; order checked per broker): %d; "+
			"handled out of order across the fail-over (informational): %d\n", v.KeysMovedBroker, v.MovedKeyInversions)
	}
	if r.DataRaces > 0 {
		fmt.Fprintf(w, "DATA RACES reported by children: %d (see the logs)\n", r.DataRaces)
	}
	drain := "drained in " + secs(r.DrainTime)
	if !r.Drained {
		drain = "NOT drained"
	}
	audit := "complete"
	if !r.AuditComplete {
		audit = "INCOMPLETE"
	}
	fmt.Fprintf(w, "%s; broker audit %s\n", drain, audit)
	fmt.Fprintf(w, "%d delayed events handled, after their due time p50 %.0f ms, p99 %.0f ms, max %.0f ms\n\n",
		v.Delayed, v.DelayedLateP50, v.DelayedLateP99, v.DelayedLateMax)

	checks := []struct {
		name string
		n    int
	}{
		{"I1 lost (committed, never handled)", v.Lost},
		{"I2 phantom (handled, never committed)", v.Phantom},
		{"I3 duplicate effects", v.DuplicateEffects},
		{"I4 disagreements (broker vs barrier/outbox)", v.Disagreements},
		{"I5 per-key order violations (ordered outbox)", v.OrderViolations},
		{"I5 handled out of order (ordered consumer)", v.HandlerInversions},
		{"I6 outbox rows pending", v.Pending},
		{"I6 outbox rows parked", v.Parked},
		{"D1 delayed events received before due", v.Early},
		{"D2 delayed events handled late (bound)", v.LateDelayed},
		{"producer outcome mismatches", v.OutcomeMismatches},
		{"orders without an attempt record", v.Unrecorded},
	}
	for _, c := range checks {
		status := "ok"
		if c.n > 0 {
			status = "VIOLATED"
		}
		fmt.Fprintf(w, "%-48s %6d  %s\n", c.name, c.n, status)
	}
	if len(v.Examples) > 0 {
		fmt.Fprintf(w, "\nexamples:\n  %s\n", strings.Join(v.Examples, "\n  "))
	}
	b, _ := json.Marshal(r.summary())
	fmt.Fprintf(w, "\n%s\n", b)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

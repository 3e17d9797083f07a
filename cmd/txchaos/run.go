package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
)

// Log substrings the supervisor counts over all children.
const (
	logSweptCommitted  = "discarded half message was committed; republished it"
	logSweptRolledBack = "discarded half message was rolled back; dropping it"
	logCheckCommitted  = lineCheckBack + " committed"
	logCheckRolledBack = lineCheckBack + " rolled_back"
	logCheckUnknown    = lineCheckBack + " unknown"
	// logReconciled: a reconciler (HA form) published a committed event
	// the brokers had lost again; every process that runs one logs its own.
	logReconciled = "committed event missing from the brokers; publishing it again"
)

// runner is one chaos run.
type runner struct {
	cfg  config
	prog io.Writer
	rng  *mrand.Rand
	t0   time.Time

	runID      string
	dir        string
	attemptDir string

	adminDB *gorm.DB
	db      *gorm.DB
	dbName  string
	dsn     string
	topics  map[string]string // mode → topic
	// delayTopic is where delayed transactional events wait for the
	// forwarder.
	delayTopic string
	// rmq runs the broker faults (Infra only).
	rmq *rmqproc.Instance

	sup        *supervisor
	prodTx     *proc
	prodOutbox *proc
	relays     []*proc
	consumer   *proc
	sweeper    *proc

	turn   map[string]int
	faults []faultRecord
	// stalled is set when faults stopped early because the pipeline did
	// not recover from several in a row.
	stalled bool
}

// maxUnrecovered is how many faults in a row may go unrecovered before
// the run stops injecting and goes on to drain and check.
const maxUnrecovered = 3

// run performs one chaos run and writes its report to out; progress goes
// to prog. The error is for a run that could not be carried out; a run
// that found violations returns a report whose OK is false.
func run(ctx context.Context, cfg config, out, prog io.Writer) (*report, error) {
	r := &runner{cfg: cfg, prog: prog, rng: mrand.New(mrand.NewPCG(uint64(cfg.Seed), 0x7c4a05)), t0: time.Now(),
		turn: map[string]int{}}
	if err := r.prepare(); err != nil {
		return nil, err
	}
	r.logf("run %s: dir %s, seed %d", r.runID, r.dir, cfg.Seed)
	// The first client of the process decides where the RocketMQ client
	// logs go; the admin client and the audit consumer are this process's.
	rmqlog.Install(slog.New(slog.NewTextHandler(prog, nil)), slog.LevelError)
	testbed.QuietClientLogs()

	rep, err := r.execute(ctx)
	if r.sup != nil {
		r.sup.stopAll()
	}
	if rerr := r.restoreServices(ctx); rerr != nil {
		err = errors.Join(err, fmt.Errorf("restore services: %w", rerr))
	}
	keep := cfg.Keep || err != nil || rep == nil || !rep.OK()
	r.teardown(keep)
	if rep != nil {
		rep.write(out)
	}
	return rep, err
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.prog, "[%6.1fs] %s\n", time.Since(r.t0).Seconds(), fmt.Sprintf(format, args...))
}

// enabledKinds are the fault kinds of this run.
func (r *runner) enabledKinds() []string {
	kinds := r.cfg.Kinds
	if len(kinds) == 0 {
		kinds = allKinds
	}
	var out []string
	for _, k := range kinds {
		controller := r.cfg.HA == rmqproc.ReplicationController
		if infraKinds[k] && !r.cfg.Infra || haKinds[k] && r.cfg.HA == "" ||
			byHandKinds[k] && controller || controllerKinds[k] && !controller {
			continue
		}
		out = append(out, k)
	}
	return out
}

// execute runs the phases: start, faults under load, drain, audit, check.
func (r *runner) execute(ctx context.Context) (*report, error) {
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	r.startProcs(ctx)
	for _, p := range r.sup.procs {
		if p == r.sweeper {
			continue // it needs TRANS_CHECK_MAX_TIME_TOPIC, which the broker makes on its first discard
		}
		if err := p.waitReady(ctx, 2*time.Minute); err != nil {
			return nil, err
		}
	}
	if _, _, err := r.waitFresh(ctx, r.t0, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("the pipeline never carried an event end to end: %w (logs in %s)", err, filepath.Join(r.dir, "logs"))
	}
	r.logf("workload running: %s %s, relays %d; faults: %v", r.prodTx.name, r.prodOutbox.name, len(r.relays), r.enabledKinds())

	faultStart := time.Now()
	if err := r.faultPhase(ctx); err != nil {
		return nil, err
	}
	faultTime := time.Since(faultStart)
	for n := countAttempts(r.attemptDir); n < r.cfg.MinTx && !r.stalled; n = countAttempts(r.attemptDir) {
		r.logf("faults done; %d of %d transactions attempted, workload continues", n, r.cfg.MinTx)
		sleep(ctx, 5*time.Second)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}

	if err := r.restoreServices(ctx); err != nil {
		return nil, err
	}
	r.logf("stopping the producers")
	stopAll(r.prodTx, r.prodOutbox)
	drainStart := time.Now()
	drained := r.drain(ctx)
	drainTime := time.Since(drainStart)
	// Late copies (redeliveries, republished batches) get a chance to
	// show up as duplicate effects before the consumer stops.
	sleep(ctx, 5*time.Second)
	r.logf("stopping relays, consumer and sweeper")
	rest := append(slices.Clone(r.relays), r.consumer)
	if r.sweeper != nil {
		rest = append(rest, r.sweeper)
	}
	stopAll(rest...)

	r.logf("auditing the topics on the broker")
	stored, complete, err := auditTopics(ctx, r.cfg.NameServer, "chaos_"+r.runID+"_audit",
		[]string{r.topics[modeTx], r.topics[modeOutbox]}, 3*time.Second, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	snap, err := r.snapshot(ctx, stored, complete)
	if err != nil {
		return nil, err
	}
	snap.Reconciled = r.sup.reconciledIDs()
	v := evaluate(snap)
	r.countFailed()
	counts, races := r.sup.snapshotCounts()
	rep := &report{
		RunID: r.runID, Seed: r.cfg.Seed, Dir: r.dir,
		Verdict: v, Faults: r.faults, FaultTime: faultTime,
		Drained: drained, DrainTime: drainTime, AuditComplete: complete,
		CheckBacks: map[string]int{
			"committed":   counts[logCheckCommitted],
			"rolled_back": counts[logCheckRolledBack],
			"unknown":     counts[logCheckUnknown],
		},
		SweptCommitted: counts[logSweptCommitted], SweptRolledBack: counts[logSweptRolledBack],
		Reconciled: counts[logReconciled],
		DataRaces:  races, Elapsed: time.Since(r.t0),
	}
	for _, p := range r.sup.procs {
		rep.Restarts += p.deaths
	}
	return rep, nil
}

func (r *runner) startProcs(ctx context.Context) {
	r.sup = newSupervisor(r.cfg.Exe, r.cfg.ExeEnv, filepath.Join(r.dir, "logs"),
		logSweptCommitted, logSweptRolledBack, logCheckCommitted, logCheckRolledBack, logCheckUnknown, logReconciled)
	base := childSpec{
		DSN: r.dsn, NameServer: r.cfg.NameServer, Topics: r.topics,
		TxGroup:       r.txGroup(),
		RelayGroup:    "chaos_" + r.runID + "_relay",
		ConsumerGroup: "chaos_" + r.runID + "_cons",
		OrderedGroup:  "chaos_" + r.runID + "_ocons",
		AttemptDir:    r.attemptDir,
		StableName:    r.cfg.RelayNames == relayNamesStable,
		Workers:       r.cfg.Workers, Keys: r.cfg.Keys, Rate: r.cfg.Rate, RollbackRatio: r.cfg.RollbackRatio,
		DelayTopic: r.delayTopic,
		Reconcile:  r.cfg.HA != "",
	}
	if !r.cfg.NoSweeper {
		// The forwarder of delayed transactional events runs in the
		// sweeper's process.
		base.DelayRatio = r.cfg.DelayRatio
	}
	with := func(role, mode string) childSpec {
		s := base
		s.Role, s.Mode = role, mode
		return s
	}
	r.consumer = r.sup.start(ctx, "consumer", with(roleConsumer, ""))
	if !r.cfg.NoSweeper {
		r.sweeper = r.sup.start(ctx, "sweeper", with(roleSweeper, ""))
	}
	for i := range max(r.cfg.Relays, 1) {
		r.relays = append(r.relays, r.sup.start(ctx, fmt.Sprintf("relay-%d", i), with(roleRelay, "")))
	}
	r.prodTx = r.sup.start(ctx, "producer-tx", with(roleProducer, modeTx))
	r.prodOutbox = r.sup.start(ctx, "producer-outbox", with(roleProducer, modeOutbox))
}

func (r *runner) txGroup() string { return "chaos_" + r.runID + "_txp" }

// stopAll stops procs in parallel.
func stopAll(procs ...*proc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(90 * time.Second) }()
	}
	wg.Wait()
}

// faultPhase injects faults one at a time, each after the system
// recovered from the one before, until every kind reached its count and
// the duration is over.
func (r *runner) faultPhase(ctx context.Context) error {
	kinds := r.enabledKinds()
	if len(kinds) == 0 || r.cfg.FaultsPerKind <= 0 && r.cfg.Duration <= 0 {
		return nil
	}
	remaining := map[string]int{}
	for _, k := range kinds {
		remaining[k] = r.cfg.FaultsPerKind
	}
	end := time.Now().Add(r.cfg.Duration)
	unrecovered := 0
	for n := 1; ctx.Err() == nil; n++ {
		var need []string
		for _, k := range kinds {
			if remaining[k] > 0 {
				need = append(need, k)
			}
		}
		if len(need) == 0 && !time.Now().Before(end) {
			break
		}
		kind := kinds[r.rng.IntN(len(kinds))]
		if len(need) > 0 {
			kind = need[r.rng.IntN(len(need))]
		}
		remaining[kind]--
		sleep(ctx, time.Duration(r.rng.Int64N(int64(r.cfg.Gap)+1)))
		rec := r.inject(ctx, kind)
		rec.N = n
		if rec.Err == "" && !rec.End.IsZero() {
			rc, err := r.waitRecovered(ctx, rec.End, r.cfg.RecoveryTimeout, true)
			rec.Recovery, rec.Fresh, rec.CaughtUp, rec.SlowestMode = max(rc.fresh, rc.caughtUp), rc.fresh, rc.caughtUp, rc.slowest
			if err != nil {
				rec.Unrecovered, rec.Stuck = true, err.Error()
			}
		}
		r.faults = append(r.faults, rec)
		r.logFault(rec)
		if rec.Err != "" && infraKinds[rec.Kind] {
			return fmt.Errorf("fault %d (%s) failed: %s", n, rec.Kind, rec.Err)
		}
		if !rec.Unrecovered {
			unrecovered = 0
			continue
		}
		r.logf("  stuck: %s", r.diagnose(ctx))
		if unrecovered++; unrecovered >= maxUnrecovered {
			r.stalled = true
			r.logf("%d faults in a row without recovery: no more faults; draining and checking", unrecovered)
			break
		}
	}
	return ctx.Err()
}

func (r *runner) logFault(rec faultRecord) {
	outage := ""
	if !rec.End.IsZero() && rec.End.Sub(rec.Start) > 500*time.Millisecond {
		outage = fmt.Sprintf(", outage %.1fs", rec.End.Sub(rec.Start).Seconds())
	}
	switch {
	case rec.Err != "":
		r.logf("fault %d %s: %s: ERROR %s", rec.N, rec.Kind, rec.Detail, rec.Err)
	case rec.Unrecovered:
		r.logf("fault %d %s: %s%s; NOT recovered within %s (%s)", rec.N, rec.Kind, rec.Detail, outage, r.cfg.RecoveryTimeout, rec.Stuck)
	default:
		r.logf("fault %d %s: %s%s; recovered in %.1fs (fresh work in both modes after %.1fs, %s last; earlier work all handled after %.1fs)",
			rec.N, rec.Kind, rec.Detail, outage, rec.Recovery.Seconds(), rec.Fresh.Seconds(), rec.SlowestMode, rec.CaughtUp.Seconds())
	}
}

// countFailed fills in each fault's Attempted and Failed from the attempt
// records: the transactions begun from its start until it recovered (or
// the recovery timeout ran out).
func (r *runner) countFailed() {
	atts, err := readAttempts(r.attemptDir)
	if err != nil {
		r.logf("cannot read the attempt records for the availability figures: %v", err)
		return
	}
	for i := range r.faults {
		f := &r.faults[i]
		if f.Start.IsZero() || f.End.IsZero() {
			continue
		}
		until := f.End.Add(f.Recovery)
		if f.Unrecovered {
			until = f.End.Add(r.cfg.RecoveryTimeout)
		}
		for _, a := range atts {
			if a.Began.Before(f.Start) || a.Began.After(until) {
				continue
			}
			f.Attempted++
			if a.failed() {
				f.Failed++
			}
		}
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Fault kinds.
const (
	// kindHalfSent SIGKILLs the transactional producer after the half
	// message is stored and before its local transaction begins: the
	// check-back (from its next incarnation) answers ROLLBACK.
	kindHalfSent = "producer-kill-half-sent"
	// kindAfterCommit SIGKILLs a producer after its local transaction
	// committed, before END_TRANSACTION (transactional) or the relay nudge
	// (outbox): the check-back answers COMMIT; the relay finds the row.
	// Every fourth time the transactional producer stays down past the
	// check window, so the sweeper must deliver the event.
	kindAfterCommit = "producer-kill-after-commit"
	// kindProducerRandom SIGKILLs a producer wherever it is.
	kindProducerRandom = "producer-kill-random"
	// kindRelay SIGKILLs a relay after it published a batch and before it
	// marked the rows sent: they are published again.
	kindRelay = "relay-kill-mid-batch"
	// kindConsumer SIGKILLs the consumer inside a handler (effect written,
	// not committed) or after the commit and before the acknowledgement.
	kindConsumer = "consumer-kill-mid-handler"
	// kindBrokerKill SIGKILLs the broker JVM and starts it again.
	kindBrokerKill = "broker-kill-restart"
	// kindDBRestart restarts the database, in turn: a clean restart, a
	// SIGKILL of the server (the script starts it again at once), and a stop
	// for longer than the broker's transaction check window.
	kindDBRestart = "db-restart"
	// kindBrokerPause freezes the broker (SIGSTOP) for longer than the
	// send timeout, then resumes it.
	kindBrokerPause = "broker-pause"
	// kindBrokerOutage SIGKILLs the broker and keeps it down for longer
	// than the relays' MaxAttempts × MaxBackoff, so a relay that counted a
	// broker outage against its rows would park them; then starts it
	// again. The run must end with no parked row and nothing lost.
	kindBrokerOutage = "broker-long-outage"
	// kindDBOutage stops the database for longer than the consumers'
	// whole retry budgets (MaxReconsumeTimes redeliveries, or retries in
	// place), so a consumer that counted a database outage against its
	// messages would send them to %DLQ% or park them; then starts it again.
	// The consumer process is frozen (SIGSTOP) for backlogFor before the
	// database stops and thawed right after, so that it has events to
	// handle while the database is down. The run must end with nothing
	// lost.
	kindDBOutage = "db-long-outage"
	// kindSlaveKill SIGKILLs the slave of broker-a or broker-b (in turn)
	// and starts it again after 2 to 6 s (HA form only). Under
	// synchronous replication its master's sends fail meanwhile.
	kindSlaveKill = "slave-kill"
	// kindFailover is the failover after a master's disk is lost (HA form
	// only): the master of broker-a or broker-b is SIGKILLed and its store
	// deleted, its slave restarted as the group's master
	// (rmqproc.Instance.Promote), and the old master's broker started
	// again as the new master's slave from an empty store (a replacement
	// machine). What the slave had not received yet is lost.
	kindFailover = "master-kill-failover"
	// kindFailoverTail is kindFailover after the slave was paused
	// (SIGSTOP) for tailFor under load: under asynchronous replication the
	// group loses every message its master acknowledged meanwhile, and the
	// reconciler must publish the events among them again; under
	// synchronous replication the master's sends fail during the pause
	// instead.
	kindFailoverTail = "failover-tail-loss"
	// kindMasterPauseElection freezes the master of broker-a or broker-b
	// (in turn; controller form only) with SIGSTOP for 12 to 16 s, longer
	// than the controller's broker heartbeat timeout (10 s), so that the
	// controller elects the group's slave meanwhile; then resumes it, and
	// the old master, which held its connections throughout, steps down to
	// be the new master's slave.
	kindMasterPauseElection = "master-pause-election"
	// kindPlainKill is what an armed kill becomes when its point is not
	// reached in time: a plain SIGKILL. Never scheduled.
	kindPlainKill = "process-kill-plain"
)

var allKinds = append([]string{kindHalfSent, kindAfterCommit, kindProducerRandom, kindRelay, kindConsumer,
	kindBrokerKill, kindDBRestart, kindBrokerPause, kindBrokerOutage, kindDBOutage}, haKindList...)

var infraKinds = map[string]bool{kindBrokerKill: true, kindDBRestart: true, kindBrokerPause: true, kindBrokerOutage: true, kindDBOutage: true,
	kindSlaveKill: true, kindFailover: true, kindFailoverTail: true, kindMasterPauseElection: true}

// haKindList are the kinds of the HA form alone; on it the broker kinds
// act on the groups' current masters (on the controller form a killed or
// long-paused master's slave is elected in its place).
var haKindList = []string{kindSlaveKill, kindFailover, kindFailoverTail, kindMasterPauseElection}

var haKinds = map[string]bool{kindSlaveKill: true, kindFailover: true, kindFailoverTail: true, kindMasterPauseElection: true}

// byHandKinds are the HA kinds of the forms whose failover is made by hand
// (rmqproc.Instance.Promote); controllerKinds those of the controller
// form, which fails over by itself.
var (
	byHandKinds     = map[string]bool{kindFailover: true, kindFailoverTail: true}
	controllerKinds = map[string]bool{kindMasterPauseElection: true}
)

// electionPause is how long kindMasterPauseElection freezes a master:
// past the controller's broker heartbeat timeout (10 s) by 2 to 6 s.
func electionPause(extra time.Duration) time.Duration { return 12*time.Second + extra }

// tailFor is how long kindFailoverTail pauses the slave before the
// failover: the load commits some tens of events meanwhile.
const tailFor = 3 * time.Second

// dbKinds are the kinds that stop or restart the database.
var dbKinds = map[string]bool{kindDBRestart: true, kindDBOutage: true}

// brokerOutageFor is how long kindBrokerOutage keeps the broker down:
// longer than the relays' relayMaxAttempts × relayMaxBackoff by 5 s and
// extra.
func brokerOutageFor(extra time.Duration) time.Duration {
	return relayMaxAttempts*relayMaxBackoff + 5*time.Second + extra
}

// backlogFor is how long kindDBOutage freezes the consumer before the
// database stops: the events committed meanwhile wait on the broker.
const backlogFor = 3 * time.Second

// dbOutageFor is how long kindDBOutage keeps the database down: longer
// than either consumer's retry budget by 5 s and extra.
func dbOutageFor(extra time.Duration) time.Duration {
	return max(consumerRetryBudget(), orderedRetryBudget()) + 5*time.Second + extra
}

// producerDownFor outlasts the test broker's check window
// (transactionTimeOut 1 s + transactionCheckMax 5 × 1 s).
const producerDownFor = 10 * time.Second

// pointTimeout bounds the wait for an armed kill point.
const pointTimeout = 20 * time.Second

// faultRecord is one injected fault.
type faultRecord struct {
	N      int    `json:"n"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	// Start is when the fault began; End when it was over: the process
	// dead, the service back, the broker resumed.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Recovery is the time from End until the pipeline is whole again:
	// transactions begun after End have had their events handled in both
	// modes (Fresh; SlowestMode took longest) and so have all orders
	// committed before End (CaughtUp). Unrecovered: not within the
	// recovery timeout.
	Recovery    time.Duration `json:"recovery"`
	Fresh       time.Duration `json:"fresh"`
	CaughtUp    time.Duration `json:"caught_up"`
	SlowestMode string        `json:"slowest_mode,omitempty"`
	Unrecovered bool          `json:"unrecovered,omitempty"`
	// Attempted and Failed count the transactions begun from Start until
	// the recovery, in both modes, and those of them the client got no
	// commit for (not counting the business logic's rollbacks on purpose):
	// the fault's cost in availability.
	Attempted int    `json:"attempted"`
	Failed    int    `json:"failed"`
	Stuck     string `json:"stuck,omitempty"` // why not, when Unrecovered
	Err       string `json:"err,omitempty"`
}

// inject injects one fault of kind and returns its record.
func (r *runner) inject(ctx context.Context, kind string) faultRecord {
	r.turn[kind]++
	odd := r.turn[kind]%2 == 1
	switch kind {
	case kindHalfSent:
		return r.killAt(ctx, kind, r.prodTx, syscall.SIGUSR1)
	case kindAfterCommit:
		if r.turn[kind]%4 == 3 {
			// The only producer of the group stays dead past the broker's
			// check window: no one answers the check-backs, the broker
			// discards the committed half message, and only the sweeper
			// can deliver the event.
			r.prodTx.holdRestart(producerDownFor)
			rec := r.killAt(ctx, kind, r.prodTx, syscall.SIGUSR2)
			rec.Detail += fmt.Sprintf(", restarted after %s", producerDownFor)
			return rec
		}
		return r.killAt(ctx, kind, pick(odd, r.prodTx, r.prodOutbox), syscall.SIGUSR2)
	case kindProducerRandom:
		return r.killNow(ctx, kind, pick(odd, r.prodTx, r.prodOutbox))
	case kindRelay:
		return r.killAt(ctx, kind, r.relays[r.rng.IntN(len(r.relays))], syscall.SIGUSR1)
	case kindConsumer:
		return r.killAt(ctx, kind, r.consumer, pick(odd, syscall.SIGUSR1, syscall.SIGUSR2))
	case kindBrokerKill:
		rec := faultRecord{Kind: kind, Start: time.Now()}
		target := r.brokerTarget(odd)
		if err := r.broker(ctx, "kill", target...); err != nil {
			rec.Err = err.Error()
			return rec
		}
		down := time.Duration(r.rng.Int64N(int64(2 * time.Second)))
		rec.Detail = fmt.Sprintf("%s SIGKILLed, started again after %s", brokerLabel(target), down.Round(time.Millisecond))
		sleep(ctx, down)
		if err := r.retryBroker(ctx, "start", target...); err != nil {
			rec.Err = err.Error()
		}
		rec.End = time.Now()
		return rec
	case kindBrokerOutage:
		rec := faultRecord{Kind: kind, Start: time.Now()}
		target := r.brokerTarget(odd)
		if err := r.broker(ctx, "kill", target...); err != nil {
			rec.Err = err.Error()
			return rec
		}
		down := brokerOutageFor(time.Duration(r.rng.Int64N(int64(3 * time.Second))))
		rec.Detail = fmt.Sprintf("%s SIGKILLed, kept down for %s (relays: MaxAttempts %d × MaxBackoff %s)",
			brokerLabel(target), down.Round(time.Millisecond), relayMaxAttempts, relayMaxBackoff)
		sleep(ctx, down)
		if err := r.retryBroker(ctx, "start", target...); err != nil {
			rec.Err = err.Error()
		}
		rec.End = time.Now()
		return rec
	case kindDBRestart:
		rec := faultRecord{Kind: kind, Start: time.Now()}
		var err error
		switch r.turn[kind] % 3 {
		case 1:
			rec.Detail = "mysql.sh restart"
			err = r.script(ctx, "mysql.sh", "restart")
		case 2:
			rec.Detail = "mysql.sh crash (SIGKILL; started again at once)"
			err = r.script(ctx, "mysql.sh", "crash")
		default:
			// Longer than the broker's check window (about 6 s on the test
			// broker): half messages waiting for a check-back are discarded
			// and the sweeper must republish the committed ones.
			down := 7*time.Second + time.Duration(r.rng.Int64N(int64(3*time.Second)))
			rec.Detail = fmt.Sprintf("mysql.sh stop, start again after %s", down.Round(time.Millisecond))
			err = r.stopDB(ctx, down, nil)
		}
		r.dbFaultEnded(ctx, &rec, err)
		return rec
	case kindDBOutage:
		rec := faultRecord{Kind: kind, Start: time.Now()}
		down := dbOutageFor(time.Duration(r.rng.Int64N(int64(3 * time.Second))))
		rec.Detail = fmt.Sprintf("consumer frozen %s for a backlog, then mysql.sh stop, start again after %s (retry budgets: consumer %s, ordered consumer %s)",
			backlogFor, down.Round(time.Millisecond), consumerRetryBudget(), orderedRetryBudget())
		frozen := r.consumer.signal(syscall.SIGSTOP) == nil
		sleep(ctx, backlogFor)
		err := r.stopDB(ctx, down, func() {
			if frozen {
				_ = r.consumer.signal(syscall.SIGCONT)
			}
		})
		r.dbFaultEnded(ctx, &rec, err)
		return rec
	case kindSlaveKill:
		group := r.groupTarget(odd)
		slave := r.rmq.SlaveOf(group)
		rec := faultRecord{Kind: kind, Start: time.Now()}
		if err := r.broker(ctx, "kill", slave); err != nil {
			rec.Err = err.Error()
			return rec
		}
		down := 2*time.Second + time.Duration(r.rng.Int64N(int64(4*time.Second)))
		rec.Detail = fmt.Sprintf("%s (slave of %s) SIGKILLed, started again after %s", slave, group, down.Round(time.Millisecond))
		sleep(ctx, down)
		if err := r.retryBroker(ctx, "start", slave); err != nil {
			rec.Err = err.Error()
		}
		rec.End = time.Now()
		return rec
	case kindFailover, kindFailoverTail:
		return r.failover(ctx, kind, r.groupTarget(odd))
	case kindMasterPauseElection:
		group := r.groupTarget(odd)
		master := r.rmq.MasterOf(group)
		pause := electionPause(time.Duration(r.rng.Int64N(int64(4 * time.Second))))
		rec := faultRecord{Kind: kind, Start: time.Now()}
		if err := r.broker(ctx, "pause", master); err != nil {
			rec.Err = err.Error()
			return rec
		}
		sleep(ctx, pause)
		elected := r.rmq.MasterOf(group)
		if err := r.broker(context.WithoutCancel(ctx), "resume", master); err != nil {
			rec.Err = err.Error()
		}
		rec.Detail = fmt.Sprintf("%s (master of %s) frozen for %s; the controller's master when it was resumed: %s",
			master, group, pause.Round(time.Millisecond), elected)
		rec.End = time.Now()
		return rec
	case kindBrokerPause:
		pause := r.cfg.PauseMin + time.Duration(r.rng.Int64N(int64(r.cfg.PauseMax-r.cfg.PauseMin)+1))
		target := r.brokerTarget(odd)
		rec := faultRecord{Kind: kind, Detail: fmt.Sprintf("%s frozen for %s", brokerLabel(target), pause.Round(time.Millisecond)), Start: time.Now()}
		if err := r.broker(ctx, "pause", target...); err != nil {
			rec.Err = err.Error()
			return rec
		}
		sleep(ctx, pause)
		if err := r.broker(context.WithoutCancel(ctx), "resume", target...); err != nil {
			rec.Err = err.Error()
		}
		rec.End = time.Now()
		return rec
	}
	return faultRecord{Kind: kind, Err: "unknown fault kind"}
}

// stopDB stops the database, calls stopped (when set) whether or not
// that worked, and starts it again after down.
func (r *runner) stopDB(ctx context.Context, down time.Duration, stopped func()) error {
	err := r.script(ctx, "mysql.sh", "stop")
	if stopped != nil {
		stopped()
	}
	if err != nil {
		return err
	}
	sleep(ctx, down)
	return r.retryScript(ctx, "mysql.sh", "start")
}

// dbFaultEnded records err, if any, in rec, starting the database again
// after a failed fault, and marks the fault's end.
func (r *runner) dbFaultEnded(ctx context.Context, rec *faultRecord, err error) {
	if err != nil {
		rec.Err = err.Error()
		if err := r.retryScript(ctx, "mysql.sh", "start"); err != nil {
			rec.Err += "; " + err.Error()
		}
	}
	rec.End = time.Now()
}

func pick[T any](first bool, a, b T) T {
	if first {
		return a
	}
	return b
}

// killAt arms p's kill point with sig and waits for p to die there; when
// the point is not reached in time it SIGKILLs p plainly.
func (r *runner) killAt(ctx context.Context, kind string, p *proc, sig syscall.Signal) faultRecord {
	rec := faultRecord{Kind: kind, Detail: p.name}
	if err := p.waitReady(ctx, time.Minute); err != nil {
		rec.Err = err.Error()
		return rec
	}
	_, _, exited := p.incarnation()
	rec.Start = time.Now()
	if err := p.signal(sig); err != nil {
		rec.Err = err.Error()
		return rec
	}
	select {
	case <-exited:
	case <-time.After(pointTimeout):
		_ = p.signal(syscall.SIGKILL)
		<-exited
	case <-ctx.Done():
		rec.Err = ctx.Err().Error()
		return rec
	}
	rec.End = time.Now()
	if pt := p.endedAt(); pt != "" {
		rec.Detail = p.name + " at " + pt
	} else {
		rec.Kind = kindPlainKill
		rec.Detail = fmt.Sprintf("%s: %s point not reached in %s; plain SIGKILL", p.name, kind, pointTimeout)
	}
	return rec
}

// killNow SIGKILLs p wherever it is.
func (r *runner) killNow(ctx context.Context, kind string, p *proc) faultRecord {
	rec := faultRecord{Kind: kind, Detail: p.name}
	if err := p.waitReady(ctx, time.Minute); err != nil {
		rec.Err = err.Error()
		return rec
	}
	_, _, exited := p.incarnation()
	rec.Start = time.Now()
	if err := p.signal(syscall.SIGKILL); err != nil {
		rec.Err = err.Error()
		return rec
	}
	<-exited
	rec.End = time.Now()
	return rec
}

// brokerTarget is the broker a broker fault acts on: none named (the one
// broker) or, on the cluster, broker-a and broker-b in turn; on the HA
// form the master of broker-a or broker-b now.
func (r *runner) brokerTarget(odd bool) []string {
	if !r.cfg.Cluster {
		return nil
	}
	group := r.groupTarget(odd)
	if r.cfg.HA != "" {
		return []string{r.rmq.MasterOf(group)}
	}
	return []string{group}
}

// groupTarget is broker-a or broker-b (a broker name, or a group of the
// HA form).
func (r *runner) groupTarget(odd bool) string {
	return pick(odd, r.cfg.Brokers[0].Name, r.cfg.Brokers[1].Name)
}

// failover injects kindFailover or kindFailoverTail on group: the fault
// ends when the promoted slave takes messages; the old master's broker
// then comes back as its slave, with the run's topics.
func (r *runner) failover(ctx context.Context, kind, group string) faultRecord {
	master, slave := r.rmq.MasterOf(group), r.rmq.SlaveOf(group)
	rec := faultRecord{Kind: kind, Start: time.Now()}
	rec.Detail = fmt.Sprintf("%s's store deleted, %s promoted", master, slave)
	if kind == kindFailoverTail {
		if err := r.broker(ctx, "pause", slave); err != nil {
			rec.Err = err.Error()
			return rec
		}
		rec.Detail = fmt.Sprintf("%s paused %s, then %s", slave, tailFor, rec.Detail)
		sleep(ctx, tailFor)
	}
	if err := r.broker(context.WithoutCancel(ctx), "promote", group); err != nil {
		rec.Err = err.Error()
		return rec
	}
	rec.End = time.Now()
	start := time.Now()
	if err := r.retryBroker(ctx, "start", master); err != nil {
		rec.Err = err.Error()
		return rec
	}
	if err := r.topicsOn(context.WithoutCancel(ctx), r.rmq.SlaveAddr(group)); err != nil {
		rec.Err = err.Error()
		return rec
	}
	rec.Detail += fmt.Sprintf("; %s back as its slave after %s", master, time.Since(start).Round(time.Second))
	return rec
}

func brokerLabel(target []string) string {
	if len(target) == 0 {
		return "broker"
	}
	return target[0]
}

// script runs scripts/<name> verb [args] (mysql.sh), logging its output
// to the run's scripts.log.
func (r *runner) script(ctx context.Context, name, verb string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(r.cfg.Root, "scripts", name), append([]string{verb}, args...)...)
	cmd.Dir = r.cfg.Root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	r.scriptLogf("=== %s %s %s %v (%s, err %v)\n%s", start.UTC().Format(time.RFC3339Nano), name, verb, args, time.Since(start).Round(time.Millisecond), err, out.String())
	if err != nil {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		return fmt.Errorf("scripts/%s %s: %w: %s", name, strings.Join(append([]string{verb}, args...), " "), err, lines[len(lines)-1])
	}
	return nil
}

// broker runs verb (kill, start, pause or resume) on the broker of
// target (none: the one broker, or every broker of the cluster) with
// rmqproc, whose output goes to the run's scripts.log.
func (r *runner) broker(ctx context.Context, verb string, target ...string) error {
	if r.rmq == nil {
		return fmt.Errorf("broker %s: broker faults need -infra", verb)
	}
	name := ""
	if len(target) > 0 {
		name = target[0]
	}
	start := time.Now()
	r.scriptLogf("=== %s rmq %s %v\n", start.UTC().Format(time.RFC3339Nano), verb, target)
	var err error
	switch verb {
	case "kill":
		err = r.rmq.Kill(name)
	case "start":
		err = r.rmq.Start(ctx, name)
	case "pause":
		err = r.rmq.Pause(name)
	case "resume":
		err = r.rmq.Resume(name)
	case "promote":
		err = r.rmq.Promote(ctx, name)
	default:
		err = fmt.Errorf("unknown verb %q", verb)
	}
	r.scriptLogf("=== rmq %s %v: %s, err %v\n", verb, target, time.Since(start).Round(time.Millisecond), err)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, brokerLabel(target), err)
	}
	return nil
}

// retryBroker runs broker verb until it succeeds, up to three times.
func (r *runner) retryBroker(ctx context.Context, verb string, target ...string) error {
	var err error
	for range 3 {
		if err = r.broker(context.WithoutCancel(ctx), verb, target...); err == nil {
			return nil
		}
		sleep(ctx, 2*time.Second)
	}
	return err
}

func (r *runner) scriptLogf(format string, args ...any) {
	fmt.Fprintf(&scriptLog{path: filepath.Join(r.dir, "logs", "scripts.log")}, format, args...)
}

// scriptLog appends each Write to the file at path.
type scriptLog struct{ path string }

func (l *scriptLog) Write(p []byte) (int, error) {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Write(p)
}

// retryScript runs a start script until it succeeds, up to three times.
func (r *runner) retryScript(ctx context.Context, name, verb string, args ...string) error {
	var err error
	for range 3 {
		if err = r.script(context.WithoutCancel(ctx), name, verb, args...); err == nil {
			return nil
		}
		sleep(ctx, 2*time.Second)
	}
	return err
}

// restoreServices leaves the broker and the database running, whatever
// state a fault left them in.
func (r *runner) restoreServices(ctx context.Context) error {
	if !r.cfg.Infra {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	_ = r.broker(ctx, "resume")
	if err := r.retryBroker(ctx, "start"); err != nil {
		return err
	}
	if !r.touchesDB() {
		return nil // the database was left alone
	}
	return r.retryScript(ctx, "mysql.sh", "start")
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// touchesDB reports whether a fault kind of this run stops or restarts
// the database.
func (r *runner) touchesDB() bool {
	for _, k := range r.enabledKinds() {
		if dbKinds[k] {
			return true
		}
	}
	return false
}

// enabled reports whether kind is a fault kind of this run.
func (r *runner) enabled(kind string) bool {
	for _, k := range r.enabledKinds() {
		if k == kind {
			return true
		}
	}
	return false
}

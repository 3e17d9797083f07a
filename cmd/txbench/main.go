// Command txbench measures txmsg against the real broker and database,
// side by side with the naive way (commit, then a plain send) and with the
// raw rocketmq-client-go producer, in one run:
//
//	B0  business transaction alone: insert an order row, commit
//	B1  naive and unsafe: B0, then a plain SendSync after the commit
//	B2  transactional mode: the same insert through txmsg.Producer.Send
//	    over txrmq.NewTransactional
//	B3  local-table mode, enqueue side: the same insert plus an outbox row
//	    through txmsg.Producer.Send over outbox.Transact, no relay running
//	F2  the floor of B2: rocketmq-client-go's own transactional producer,
//	    the same business write as its local transaction, a listener that
//	    commits without any table
//	F3  the floor of B3: B0 plus one raw INSERT of the outbox row's bytes
//	    into a table of the outbox's shape, without txmsg
//	B0r-F3r  the same six with a realistic business transaction: an order,
//	    its three lines and one stock update (five statements)
//	COST the database commands, round trips and bytes of each kind of event
//	    (B0, B2, B3, B0r, B2r, B3r, Resolve, relay), counted on the wire
//	B4  relays draining a pre-filled outbox backlog, against
//	R0  the raw client sending the same messages one SendSync at a time
//	B5  outbox commit → broker acknowledgement latency at about half of
//	    B3's rate, relay running with the in-process nudge, next to
//	R5  a raw SendSync of the same message at the same rate
//	B6  checker.Resolve answering check-backs for committed, rolled-back
//	    and unknown IDs; B6k the known IDs alone, next to
//	P6  a bare primary-key SELECT of the same IDs on the same pool
//	B6c the Transactional answering check-backs for committed and
//	    rolled-back transactions of its own from its outcome cache
//	B7  relay drain rate and resident memory with a 1,000,000-row backlog
//	B8  consumer throughput, concurrent (txrmq.Consumer) next to ordered
//	    (txrmq.OrderedConsumer), for one sharding key and for many
//	DR/DT/DL  delay phase: lateness of delayed events after their due
//	    time with the broker's own timer (raw client), in transactional
//	    mode (the Forwarder) and in local-table mode (the relay); DN/DF
//	    relays draining due rows without and with a backlog of rows due in
//	    a day
//	Sn  scale-out (-phases scale, not part of all): n relay processes,
//	    one relay each, drain a backlog, next to Rn, the raw client
//	    sending as many messages from n workers, for each n of
//	    -scale-relays
//
// Phases that are compared run as interleaved, repeated short trials (see
// trials.go): every ratio is the median of per-round ratios, with its
// range. Every run makes its own database and topics and removes them at
// the end.
// Progress goes to stderr; the result table (or, with -json, one JSON
// object) goes to stdout. See docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/txmsg/txmsg/internal/testbed"
)

func main() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "txbench:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	DSN        string
	NameServer string
	Broker     string

	Workers int
	Warmup  time.Duration
	Trial   time.Duration
	Trials  int
	Count   int

	Backlog         int
	BigBacklog      int
	Relays          int
	FillWorkers     int
	LatencyRate     float64
	ResolveFor      time.Duration
	ResolveRows     int
	ResolveCachedTx int
	Queues          int
	Settle          time.Duration
	Phases          string
	JSON            bool
	Smoke           bool
	Keep            bool
	CPUProfile      string
	RelayCPUProf    string
	RelayBatchSize  int
	ConsumeCount    int
	ConsumeTimeout  time.Duration
	ScaleRelays     string
	DelayEvents     int
	DelayMin        time.Duration
	FutureRows      int
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("txbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.DSN, "dsn", testbed.DSN(), "MySQL/MariaDB DSN; the run creates and drops its own database next to this one (env TXMSG_DSN)")
	fs.StringVar(&c.NameServer, "namesrv", testbed.NameServer(), "RocketMQ name server (env TXMSG_NAMESRV)")
	fs.StringVar(&c.Broker, "broker", testbed.Broker(), "RocketMQ broker address, for creating and deleting topics (env TXMSG_BROKER)")
	fs.IntVar(&c.Workers, "workers", 32, "concurrent workers of every closed-loop phase (B0-B4, R0, B6)")
	fs.DurationVar(&c.Warmup, "warmup", 3*time.Second, "warm-up of each interleaved group (each side runs half of it once, unmeasured, before the first round), and a third of it before B6c and B6cs")
	fs.DurationVar(&c.Trial, "trial", 2*time.Second, "measured time of one trial of a compared phase (B0-F3r, B5/R5; half of it for B6/B6k/P6 and B6s/B6ks/P6s); each trial is preceded by a quarter of it unmeasured")
	fs.IntVar(&c.Trials, "trials", minRounds, fmt.Sprintf("rounds of interleaved trials (at least %d): every ratio is the median of this many per-round ratios", minRounds))
	fs.IntVar(&c.Count, "count", 0, "when > 0, each business trial measures exactly count/trials operations instead of -trial")
	fs.IntVar(&c.Backlog, "backlog", 100_000, "outbox backlog drained by B4, and messages sent by R0")
	fs.IntVar(&c.BigBacklog, "backlog-big", 1_000_000, "outbox backlog drained by B7")
	fs.IntVar(&c.Relays, "relays", 4, "relays draining the backlog in B4 and B7, and R0's workers; B4 also runs with -workers relays")
	fs.IntVar(&c.RelayBatchSize, "relay-batch", 0, "RelayConfig.BatchSize of every relay; 0 means the library default")
	fs.IntVar(&c.FillWorkers, "fill-workers", 4, "concurrent writers filling backlogs and barrier rows (not measured)")
	fs.Float64Var(&c.LatencyRate, "latency-rate", 0, "B5 commits per second; 0 means half of B3's measured rate")
	fs.DurationVar(&c.ResolveFor, "resolve-duration", 10*time.Second, "measured time of B6c (a fifth of it) and B6cs")
	fs.IntVar(&c.ResolveRows, "resolve-rows", 100_000, "barrier rows of each state (committed, rolled back) pre-filled for B6")
	fs.IntVar(&c.ResolveCachedTx, "resolve-cached-tx", 5_000, "transactions (half rolled back) whose outcomes B6c's check-backs ask the Transactional's cache for")
	fs.DurationVar(&c.Settle, "settle", 2*time.Second, "pause between filling a backlog and draining it, for InnoDB's background work")
	fs.IntVar(&c.Queues, "queues", 8, "write queues of each topic the run creates")
	fs.IntVar(&c.ConsumeCount, "consume-count", 10_000, "events each B8 consumer handles")
	fs.DurationVar(&c.ConsumeTimeout, "consume-timeout", 5*time.Minute, "longest wait for one B8 consumer to handle its events")
	fs.StringVar(&c.Phases, "phases", "all", "comma-separated phases to run: b0,b1,b2,b3,f2,f3,b0r,b1r,b2r,b3r,f2r,f3r (those named run interleaved),cost,b4,b5,b6,b7,b8,delay (b4 includes r0, b5 r5, b6 b6k, p6 and b6c), and scale, which all does not include")
	fs.IntVar(&c.DelayEvents, "delay-events", 200, "delayed events sent by each lateness phase of delay (DR, DT, DL)")
	fs.DurationVar(&c.DelayMin, "delay-min", 3*time.Second, "shortest delay of the lateness phases; due times spread over the next second")
	fs.IntVar(&c.FutureRows, "future-rows", 1_000_000, "rows due in a day next to the due backlog of DF (delay phase)")
	fs.StringVar(&c.ScaleRelays, "scale-relays", "1,2,4,8,16,32", "relay process counts of the scale phase, each next to the raw client with as many workers")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object instead of the table")
	fs.BoolVar(&c.Smoke, "smoke", false, "tiny counts and durations: checks the harness end to end in seconds, measures nothing")
	fs.BoolVar(&c.Keep, "keep", false, "keep the run's database and topics (for inspection)")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of this process (B0-B3, B5, B6, R0) to this file")
	fs.StringVar(&c.RelayCPUProf, "relay-cpuprofile", "", "write CPU profiles of the relay child processes (B4, B7) to this file prefix")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.Smoke {
		c.Warmup = 100 * time.Millisecond
		c.Trial = 400 * time.Millisecond // long enough for a five-statement transaction on a loaded machine
		c.Trials = minRounds
		c.Count = 0
		c.Backlog = 300
		c.BigBacklog = 600
		c.ResolveFor = time.Second
		c.Settle = 0
		c.ResolveRows = 200
		c.ResolveCachedTx = 40
		c.Workers = min(c.Workers, 4)
		c.Relays = min(c.Relays, 2)
		c.Queues = 2
		c.ConsumeCount = 200
		c.ConsumeTimeout = time.Minute
		c.DelayEvents = 10
		c.DelayMin = 2 * time.Second
		c.FutureRows = 1000
	}
	if c.Workers <= 0 || c.Relays <= 0 || c.FillWorkers <= 0 || c.Backlog <= 0 || c.BigBacklog <= 0 || c.ResolveRows <= 0 || c.ResolveCachedTx <= 0 || c.Queues <= 0 ||
		c.ConsumeCount <= 1 || c.ConsumeTimeout <= 0 || c.DelayEvents <= 0 || c.DelayMin <= 0 || c.FutureRows <= 0 {
		return nil, errors.New("counts must be positive")
	}
	if c.Trials < minRounds || c.Trial <= 0 {
		return nil, fmt.Errorf("-trials must be at least %d and -trial positive: a median of fewer rounds does not tell a change from the noise", minRounds)
	}
	return c, nil
}

// phases in run order. "business" and "business-r" are the interleaved
// groups of the business phases b0-f3 and b0r-f3r, run when any of their
// phases is enabled.
var allPhases = []string{"business", "business-r", "cost", "b5", "b6", "b8", "b4", "b7", "delay", "scale"}

func (c *config) enabled(phase string) bool {
	if phase == "business" || phase == "business-r" {
		suffix := strings.TrimPrefix(phase, "business-")
		if suffix == phase {
			suffix = ""
		}
		for _, base := range businessBases {
			if c.enabled(base + suffix) {
				return true
			}
		}
		return false
	}
	if c.Phases == "all" || c.Phases == "" {
		return phase != "scale"
	}
	for _, p := range strings.Split(c.Phases, ",") {
		if strings.TrimSpace(strings.ToLower(p)) == phase {
			return true
		}
	}
	return false
}

// run is the whole benchmark; main and the smoke test call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rlog.SetLogLevel("error")
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	started := time.Now()
	b := &bench{cfg: cfg, log: log, progress: newProgress(stderr), res: newResults()}
	env, err := setup(ctx, cfg, log, b.progress)
	if err != nil {
		return err
	}
	b.env = env
	b.res.extra["machine"] = machine(ctx, env.db)
	runErr := b.runPhases(ctx)
	// Clean up before printing: a reader that closes stdout early (| head)
	// must not leave the run's database behind.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := env.cleanup(cctx); err != nil {
		log.Warn("cleanup incomplete", "err", err)
	}
	if runErr != nil {
		return runErr
	}
	b.res.settings(cfg, time.Since(started))
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		if m, ok := b.res.extra["machine"].(map[string]any); ok {
			m["loadavg_at_end"] = strings.Join(strings.Fields(string(l))[:3], " ")
		}
	}
	b.progress.printf("done in %s", time.Since(started).Round(time.Second))
	if cfg.JSON {
		return b.res.writeJSON(stdout)
	}
	return b.res.writeTable(stdout)
}

func (b *bench) runPhases(ctx context.Context) error {
	for _, p := range allPhases {
		if !b.cfg.enabled(p) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := b.phase(ctx, p); err != nil {
			return fmt.Errorf("phase %s: %w", strings.ToUpper(p), err)
		}
	}
	return nil
}

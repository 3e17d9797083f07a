// Command txchaos is txmsg's chaos suite. It drives an order workload in
// both modes against the real broker and database, with every component in
// its own OS process, injects faults on a schedule while the workload runs,
// lets pending work drain, and checks the invariants of docs/design.md:
//
//	I1 every committed business transaction yields exactly one handled event
//	I2 a rolled-back or never-committed transaction yields none
//	I3 no event's effects are applied twice
//	I4 the broker's final state agrees with the barrier (and the outbox)
//	I5 per-key order holds in the ordered local-table mode
//	I6 pending work drains to zero
//
// Processes (each a re-execution of this binary, restarted by a supervisor
// loop whenever it dies):
//
//	producer-tx      transactional mode: txrmq.Transactional + barrier
//	producer-outbox  local-table mode: outbox.Outbox
//	relay-0, relay-1 ordered outbox relays
//	consumer         txrmq.Consumer + txmsg.Inbox for both topics
//	sweeper          txrmq.Sweeper for half messages past the check window
//
// Fault kinds: see faults.go. Progress goes to stderr, the report to stdout;
// its last line is one JSON object. The exit status is 1 when an invariant
// was violated. See docs/reliability.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
)

func main() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	rep, err := run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "txchaos:", err)
		os.Exit(2)
	}
	if !rep.OK() {
		os.Exit(1)
	}
}

// config is one chaos run.
type config struct {
	DSN        string
	NameServer string
	Broker     string
	// Cluster runs on the two-broker cluster of scripts/rocketmq.sh (start
	// --cluster): topics on every broker of Brokers, broker faults on
	// broker-a and broker-b in turn.
	Cluster bool
	Brokers []testbed.ClusterBroker
	// HA runs on the HA form of scripts/rocketmq.sh (start --ha or
	// --ha-sync): two groups of a master and a slave, replicating async or
	// sync. It implies Cluster (Brokers are the masters) and Infra, adds
	// the HA fault kinds, and turns the reconciler on in every stack.
	HA rmqproc.Replication
	// Root is the repository root: scripts/ lives there.
	Root string
	// Dir holds the run's logs and attempt records. Default
	// <Root>/.cache/chaos/<run id>.
	Dir string
	// Exe and ExeEnv re-execute this program as a child.
	Exe    string
	ExeEnv []string

	// Duration is how long faults are injected at least; the phase also
	// lasts until every kind reached FaultsPerKind.
	Duration      time.Duration
	FaultsPerKind int
	// Kinds are the fault kinds to inject; empty means all (all process
	// kinds without Infra).
	Kinds []string
	// Infra enables the broker and database faults, which restart shared
	// services.
	Infra bool
	// MinTx keeps the workload running after the faults until this many
	// transactions were attempted.
	MinTx int

	Rate    float64 // attempted transactions per second, per mode
	Workers int     // concurrent transactions per producer process
	Keys    int     // sharding keys per producer worker
	Relays  int
	// RelayNames is "unique" (a new relay name per process, as the
	// library's default name is) or "stable" (a restarted relay keeps its
	// name, as in a StatefulSet).
	RelayNames    string
	RollbackRatio float64
	// DelayRatio is the share of transactions sent with txmsg.WithDelay
	// (0.5 to 3 s), in both modes.
	DelayRatio float64
	// DelayLateBound is how long after its due time every delayed event
	// must be handled (D2): the longest fault, the recovery after it and
	// the consumer's redeliveries fit in it.
	DelayLateBound time.Duration
	// NoSweeper leaves the sweeper out, to show what it closes.
	NoSweeper bool

	Gap             time.Duration // quiet time between faults (random, up to this)
	RecoveryTimeout time.Duration
	Drain           time.Duration
	PauseMin        time.Duration
	PauseMax        time.Duration
	Seed            int64
	Keep            bool
}

func defaultConfig() config {
	return config{
		DSN:             testbed.DSN(),
		NameServer:      testbed.NameServer(),
		Broker:          testbed.Broker(),
		Duration:        9 * time.Minute,
		FaultsPerKind:   10,
		Infra:           true,
		MinTx:           5000,
		Rate:            12,
		Workers:         6,
		Keys:            3,
		Relays:          2,
		RelayNames:      relayNamesUnique,
		RollbackRatio:   0.1,
		DelayRatio:      0.1,
		DelayLateBound:  2 * time.Minute,
		Gap:             1500 * time.Millisecond,
		RecoveryTimeout: 60 * time.Second,
		Drain:           3 * time.Minute,
		PauseMin:        4 * time.Second,
		PauseMax:        12 * time.Second,
		Seed:            time.Now().UnixNano(),
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("txchaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.DSN, "dsn", cfg.DSN, "MySQL/MariaDB DSN; the run creates and drops its own database next to it")
	fs.StringVar(&cfg.NameServer, "namesrv", cfg.NameServer, "RocketMQ name server")
	fs.StringVar(&cfg.Broker, "broker", cfg.Broker, "RocketMQ broker address (topic creation)")
	fs.StringVar(&cfg.Root, "root", "", "repository root holding scripts/ (default: found from the working directory)")
	fs.StringVar(&cfg.Dir, "dir", "", "run directory for logs and attempt records (default .cache/chaos/<run>)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "inject faults for at least this long")
	fs.IntVar(&cfg.FaultsPerKind, "faults", cfg.FaultsPerKind, "inject at least this many faults of each kind")
	kinds := fs.String("kinds", "", "comma-separated fault kinds (default all): "+strings.Join(allKinds, ","))
	fs.BoolVar(&cfg.Infra, "infra", cfg.Infra, "inject broker and database faults (restarts the shared services)")
	fs.IntVar(&cfg.MinTx, "min-tx", cfg.MinTx, "keep the workload running until this many transactions were attempted")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "attempted transactions per second, per mode")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent transactions per producer")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "sharding keys per producer worker")
	fs.IntVar(&cfg.Relays, "relays", cfg.Relays, "ordered relay processes")
	fs.StringVar(&cfg.RelayNames, "relay-names", cfg.RelayNames, "relay names: unique (new name per process, like the library's default) or stable (kept across restarts)")
	fs.Float64Var(&cfg.RollbackRatio, "rollback", cfg.RollbackRatio, "share of transactions whose business logic fails")
	fs.Float64Var(&cfg.DelayRatio, "delayed", cfg.DelayRatio, "share of transactions sent with a delay of 0.5 to 3 s (txmsg.WithDelay)")
	fs.DurationVar(&cfg.DelayLateBound, "delayed-late-bound", cfg.DelayLateBound, "D2: every delayed event is handled within this long after its due time")
	fs.DurationVar(&cfg.Gap, "gap", cfg.Gap, "longest quiet time between a recovery and the next fault")
	fs.DurationVar(&cfg.RecoveryTimeout, "recovery-timeout", cfg.RecoveryTimeout, "longest wait for recovery after a fault")
	fs.DurationVar(&cfg.Drain, "drain", cfg.Drain, "deadline for pending work to drain after the faults")
	fs.DurationVar(&cfg.PauseMin, "pause-min", cfg.PauseMin, "shortest broker pause (longer than the 3 s send timeout)")
	fs.DurationVar(&cfg.PauseMax, "pause-max", cfg.PauseMax, "longest broker pause")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "random seed of the schedule")
	fs.BoolVar(&cfg.Cluster, "cluster", false, "run on the two-broker cluster (TXMSG_CLUSTER_NAMESRV, TXMSG_CLUSTER_BROKERS; make chaos CLUSTER=1): topics on both brokers, broker faults on broker-a and broker-b in turn")
	ha := fs.Bool("ha", false, "run on the HA form (TXMSG_HA=async|sync|controller, TXMSG_HA_NAMESRV, TXMSG_HA_BROKERS; make chaos HA=1, HA=sync or HA=controller): topics on every master and slave, the HA fault kinds ("+strings.Join(haKindList, ",")+"; master-kill-failover and failover-tail-loss not on the controller form, master-pause-election only there) besides the others, the reconciler on")
	fs.BoolVar(&cfg.NoSweeper, "no-sweeper", false, "run without the sweeper (shows the events it saves as I1 violations)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run's database and topics")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.RelayNames != relayNamesUnique && cfg.RelayNames != relayNamesStable {
		fmt.Fprintf(stderr, "-relay-names must be %s or %s\n", relayNamesUnique, relayNamesStable)
		return cfg, flag.ErrHelp
	}
	if *kinds != "" {
		cfg.Kinds = strings.Split(*kinds, ",")
		for _, k := range cfg.Kinds {
			if !slices.Contains(allKinds, k) {
				fmt.Fprintf(stderr, "-kinds: unknown fault kind %q (kinds: %s)\n", k, strings.Join(allKinds, ","))
				return cfg, flag.ErrHelp
			}
		}
	}
	if *ha {
		hc, err := rmqproc.HAFromEnv()
		if err != nil {
			fmt.Fprintln(stderr, "-ha:", err)
			return cfg, flag.ErrHelp
		}
		if !cfg.Infra {
			fmt.Fprintln(stderr, "-ha needs -infra: its faults kill brokers")
			return cfg, flag.ErrHelp
		}
		cfg.HA, cfg.Cluster, cfg.NameServer, cfg.Brokers = hc.HA, true, hc.NameServer, hc.Brokers
		cfg.Broker = cfg.Brokers[0].Addr
	} else if cfg.Cluster {
		ns := testbed.ClusterNameServer()
		if ns == "" {
			fmt.Fprintln(stderr, "-cluster needs TXMSG_CLUSTER_NAMESRV (and TXMSG_CLUSTER_BROKERS unless the default ports); make chaos CLUSTER=1 sets them")
			return cfg, flag.ErrHelp
		}
		cfg.NameServer = ns
		cfg.Brokers = testbed.ClusterBrokers()
		if len(cfg.Brokers) < 2 {
			fmt.Fprintln(stderr, "-cluster: TXMSG_CLUSTER_BROKERS must name two brokers as name=host:port,...")
			return cfg, flag.ErrHelp
		}
		cfg.Broker = cfg.Brokers[0].Addr
	}
	return cfg, nil
}

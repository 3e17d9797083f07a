// Command rmq runs the RocketMQ processes of the txmsg test bed (package
// internal/testbed/rmqproc); scripts/rocketmq.sh runs it for every verb but
// fetch.
//
//	rmq [-cluster | -ha | -ha-sync | -ha-controller | -stock] [-ready-timeout 120s] [-root dir] start|stop|status|kill|pause|resume|owns|wipe|ready|promote|rebuild [broker]
//
//	start    start what is not running and wait until a message can be sent
//	stop     stop what was started here (broker: that broker of the cluster only)
//	status   print running / not running per process (exit 3 when one is not)
//	kill     SIGKILL the broker (a crash; the name server stays up); start brings it back
//	pause    SIGSTOP the broker (it holds connections but answers nothing)
//	resume   SIGCONT the broker
//	owns     exit 0 when the running broker was started here (so kill, pause
//	         and resume can act on it), else 1
//	wipe     delete the store and logs of a stopped instance
//	ready    only wait until the name server routes a message (to every
//	         broker with -cluster)
//	promote  (-ha, a master's name) a failover by hand after a lost disk:
//	         SIGKILL the master and delete its store, restart its slave as
//	         the group's master; the group keeps what the slave had
//	rebuild  (-ha, a master's name) undo promote: both stores deleted, the
//	         master and its slave started afresh
//
// The single form reads TXMSG_NAMESRV and TXMSG_BROKER; -cluster (or a
// broker name) the two-broker cluster of TXMSG_CLUSTER_NAMESRV and
// TXMSG_CLUSTER_BROKERS. Both read TXMSG_RMQ_VERSION, TXMSG_CACHE,
// TXMSG_ROCKETMQ_MODE and TXMSG_RMQ_EXTRA_CONF (see docs/testing.md).
// -ha and -ha-sync act on the HA form of TXMSG_HA_NAMESRV and
// TXMSG_HA_BROKERS: two groups of a master and a slave (broker-a,
// broker-a-s, broker-b, broker-b-s), with asynchronous or synchronous
// replication; -ha-controller the same groups in RocketMQ 5's controller
// mode, where a controller inside the name server elects each group's
// master and fails it over by itself; TXMSG_HA=async|sync|controller
// picks the form as the flags do.
// -stock starts the single form's broker with RocketMQ's stock settings
// (scripts/rocketmq/stock.conf instead of scripts/rocketmq/broker.conf),
// on ports other than the default ones, and refuses to when the store's
// disk is fuller than such a broker works with.
//
// Exit status: 0 done, 1 failed (owns: not owned), 2 bad usage, 3 status
// found a process not running.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("rmq", flag.ContinueOnError)
	cluster := fs.Bool("cluster", false, "act on the two-broker cluster (TXMSG_CLUSTER_NAMESRV, TXMSG_CLUSTER_BROKERS)")
	ha := fs.Bool("ha", false, "act on the HA form: two master/slave groups, asynchronous replication (TXMSG_HA_NAMESRV, TXMSG_HA_BROKERS)")
	haSync := fs.Bool("ha-sync", false, "act on the HA form with synchronous replication (SYNC_MASTER, inSyncReplicas=2)")
	haController := fs.Bool("ha-controller", false, "act on the HA form in controller mode: a controller in the name server elects each group's master (RocketMQ 5.1+)")
	stock := fs.Bool("stock", false, "start the broker with RocketMQ's stock settings (scripts/rocketmq/stock.conf); ports of its own")
	timeout := fs.Duration("ready-timeout", 120*time.Second, "how long start waits until RocketMQ takes messages")
	root := fs.String("root", "", "repository root (default: found from the working directory)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: rmq [-cluster | -ha | -ha-sync | -ha-controller | -stock] [-ready-timeout 120s] [-root dir] start|stop|status|kill|pause|resume|owns|wipe|ready|promote|rebuild [broker]")
		fs.PrintDefaults()
	}
	// Flags may come after the verb too (scripts/rocketmq.sh start --cluster).
	var rest []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(rest) < 1 || len(rest) > 2 {
		fs.Usage()
		return 2
	}
	verb, broker := rest[0], ""
	if len(rest) == 2 {
		broker = rest[1]
		*cluster = true // a broker name is for the cluster
	}
	var cfg rmqproc.Config
	var err error
	if *ha || *haSync || *haController || os.Getenv("TXMSG_HA") != "" {
		cfg, err = rmqproc.HAFromEnv()
		if *haController {
			cfg.HA = rmqproc.ReplicationController
		} else if *haSync {
			cfg.HA = rmqproc.ReplicationSync
		} else if *ha {
			cfg.HA = rmqproc.ReplicationAsync
		}
	} else {
		cfg, err = rmqproc.FromEnv(*cluster)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmq:", err)
		return 2
	}
	cfg.ReadyTimeout = *timeout
	cfg.Stock = *stock
	cfg.Root = *root
	cfg.Log = os.Stdout
	in, err := rmqproc.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmq:", err)
		return 2
	}
	// The readiness probe's client logs errors only.
	rmqlog.Install(slog.New(slog.NewTextHandler(os.Stderr, nil)), slog.LevelError)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch verb {
	case "start":
		err = in.Start(ctx, broker)
	case "stop":
		err = in.Stop(broker)
	case "status":
		err = in.Status(broker)
		if errors.Is(err, rmqproc.ErrNotRunning) {
			return 3
		}
	case "kill":
		err = in.Kill(broker)
	case "pause":
		err = in.Pause(broker)
	case "resume":
		err = in.Resume(broker)
	case "owns":
		if !in.Owns(broker) {
			return 1
		}
	case "wipe":
		err = in.Wipe(broker)
	case "promote", "rebuild":
		if broker == "" {
			fmt.Fprintf(os.Stderr, "rmq: %s needs the name of a master of the HA form, e.g. -ha %s broker-a\n", verb, verb)
			return 2
		}
		if verb == "promote" {
			err = in.Promote(ctx, broker)
		} else {
			err = in.Rebuild(ctx, broker)
		}
	case "ready":
		rctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		err = rmqproc.WaitReady(rctx, in.Config().NameServer, in.Masters(), os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "rmq: unknown verb %q\n", verb)
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmq:", strings.TrimSpace(err.Error()))
		return 1
	}
	return 0
}

// Command txmsgctl administers txmsg's tables: it creates them, reports
// their state, inspects and requeues parked messages, and applies retention.
// It also creates and checks the RocketMQ topics that consumers need.
//
//	txmsgctl migrate                     create the barrier, inbox, parked and outbox tables
//	txmsgctl stats [-json]               outbox depth and lag, barrier rows, inbox size, parked and failing messages
//	txmsgctl failing [-group G] [ID...]  messages whose handler is failing, per group
//	txmsgctl parked list    -kind outbox|consumer
//	txmsgctl parked show    -kind outbox|consumer [-full | -out FILE] ID...
//	txmsgctl parked requeue -kind outbox|consumer ID...
//	txmsgctl parked purge   -kind outbox|consumer (-older-than D | ID...)
//	txmsgctl purge                       apply retention now
//	txmsgctl reconcile -since 10m        publish again the committed events the brokers lost
//	txmsgctl serve [-addr 127.0.0.1:8089] run the web dashboard (package dashboard)
//	txmsgctl topic create -namesrv HOST:PORT -topic a,b [-queues 8]   create topics on every broker of the cluster
//	txmsgctl topic check  -namesrv HOST:PORT -topic a,b [-queues N]   check that they are routed, with their queues
//
// The database is -dsn or $TXMSG_DSN, a go-sql-driver/mysql DSN. Its
// password is never printed. Run "txmsgctl help" for every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

func main() {
	// The MySQL driver logs connection trouble through its own global
	// logger; txmsgctl reports errors itself.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// errUsage marks errors in the command line: they exit with exitUsage.
// errFlags is one the flag package has reported already.
var (
	errUsage = errors.New("usage")
	errFlags = fmt.Errorf("%w: bad flags", errUsage)
)

// usageErr is a command-line mistake; it matches errUsage.
type usageErr struct{ msg string }

func (e usageErr) Error() string      { return e.msg }
func (usageErr) Is(target error) bool { return target == errUsage }

// usageError returns a usageErr.
func usageError(format string, args ...any) error {
	return usageErr{msg: fmt.Sprintf(format, args...)}
}

const usageText = `txmsgctl administers txmsg's tables and RocketMQ topics.

Usage:
  txmsgctl migrate [flags]
      Create or update the barrier, inbox, parked, failing, outbox, instance
      and history tables (-only barrier,inbox,outbox,fleet picks some).
  txmsgctl stats [flags] [-json]
      Outbox rows by status and the oldest pending row's age; barrier rows
      by state; inbox rows, parked and failing messages by consumer group.
  txmsgctl parked list    -kind outbox|consumer [-group G] [-limit N]
  txmsgctl parked show    -kind outbox|consumer [-group G] [-full | -out FILE] ID...
      Print rows with the first 4 KiB of each body; -full prints whole
      bodies, -out writes one body as stored to a new file.
  txmsgctl parked requeue -kind outbox ID...
      Make parked outbox rows pending again; the relays publish them.
  txmsgctl parked requeue -kind consumer -namesrv HOST:PORT [-group G] ID...
      Publish parked messages again with their txmsg ID, then delete them.
  txmsgctl parked purge   -kind outbox|consumer [-group G] (-older-than D | ID...)
      Delete parked outbox rows or parked messages, by age or by ID.
      "dead" is an alias of "parked" (txmsgctl dead list ...).
  txmsgctl failing [-group G] [-limit N] [-full] [ID...]
      Messages whose handler is failing, per consumer group: failures,
      first and last failure, last error; with IDs, each one whole with
      the first 64 KiB of its body.
  txmsgctl purge [flags]
      Apply retention now: sent outbox rows, barrier rows, inbox rows and
      failing-message records older than their ages (and, when asked,
      parked rows and parked messages).
  txmsgctl reconcile -since D [-until D] [-mode transactional|outbox]
                    [-namesrv HOST:PORT] [-dry-run]
      Check the events committed in the window (barrier rows that keep
      their message, sent outbox rows) against the brokers' key index,
      and publish again, with their txmsg IDs, those no broker has; the
      consumers' inboxes drop copies of events that were not lost.
  txmsgctl serve [-addr 127.0.0.1:8089] [-allow-actions] [-namesrv HOST:PORT]
      Run the web dashboard: outbox, parked messages, transactions and,
      with -namesrv, the broker. Read-only unless -allow-actions; actions
      and any address but loopback need a token ($TXMSG_DASHBOARD_TOKEN).
      Requests must name localhost, 127.0.0.1, [::1] or one of
      -allowed-hosts in their Host header (with a token: once it is set).
  txmsgctl topic create -namesrv HOST:PORT -topic NAME[,NAME...] [-queues 8]
                        [-cluster NAME | -broker ADDR[,ADDR...]]
      Create topics (or set their queue counts) on every broker of the
      cluster, as the name server lists them (-cluster when it knows
      several), or on the brokers named by -broker; then wait until the
      name server routes them. Consumers need their topics before Start.
  txmsgctl topic check -namesrv HOST:PORT -topic NAME[,NAME...] [-queues N]
                       [-cluster NAME | -broker ADDR[,ADDR...]]
      Print each topic's queues per broker; fail when a topic does not
      exist, misses a broker of the cluster, or (with -queues) has other
      queue counts.

IDs are txmsg IDs (msg_id). Flags may come before or after the IDs.
Run "txmsgctl COMMAND -h" for a command's flags.

Environment:
  TXMSG_DSN         the database, as -dsn (user:password@tcp(host:port)/dbname)
  TXMSG_NAMESRV     RocketMQ name servers, as -namesrv
  TXMSG_ACCESS_KEY  RocketMQ ACL access key (parked requeue -kind consumer)
  TXMSG_SECRET_KEY  RocketMQ ACL secret key
  TXMSG_DASHBOARD_TOKEN  the dashboard's token (serve), as -token

Exit status: 0 success, 1 failure, 2 bad command line.
`

// run is the whole program: it parses args, runs one command and returns
// the exit status. Output goes to stdout, errors and logs to stderr;
// neither ever carries the DSN's password or the ACL secret key.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	e := &env{stdout: stdout, stderr: stderr, getenv: getenv}
	err := dispatch(ctx, e, args)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errFlags):
		return exitUsage // the flag package has printed the error and the usage
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "txmsgctl:", e.scrub(err.Error()))
		fmt.Fprintln(stderr, `run "txmsgctl help" for usage`)
		return exitUsage
	default:
		fmt.Fprintln(stderr, "txmsgctl:", e.scrub(err.Error()))
		return exitError
	}
}

func dispatch(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usageText)
		return usageError("no command")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(e.stdout, usageText)
		return nil
	case "migrate":
		return cmdMigrate(ctx, e, rest)
	case "stats":
		return cmdStats(ctx, e, rest)
	case "reconcile":
		return cmdReconcile(ctx, e, rest)
	case "purge":
		return cmdPurge(ctx, e, rest)
	case "failing":
		return cmdFailing(ctx, e, rest)
	case "serve":
		return cmdServe(ctx, e, rest)
	case "topic":
		if len(rest) == 0 {
			return usageError("topic needs a subcommand: create or check")
		}
		switch rest[0] {
		case "create":
			return cmdTopicCreate(ctx, e, rest[1:])
		case "check":
			return cmdTopicCheck(ctx, e, rest[1:])
		default:
			return usageError("unknown topic subcommand %q: want create or check", rest[0])
		}
	case "parked", "dead": // dead: the name of earlier releases
		if len(rest) == 0 {
			return usageError("parked needs a subcommand: list, show, requeue or purge")
		}
		switch rest[0] {
		case "list":
			return cmdParkedList(ctx, e, rest[1:])
		case "show":
			return cmdParkedShow(ctx, e, rest[1:])
		case "requeue":
			return cmdParkedRequeue(ctx, e, rest[1:])
		case "purge":
			return cmdParkedPurge(ctx, e, rest[1:])
		default:
			return usageError("unknown parked subcommand %q: want list, show, requeue or purge", rest[0])
		}
	default:
		return usageError("unknown command %q", cmd)
	}
}

// env is what a command writes to and reads from.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	log            *slog.Logger
	// secrets are scrubbed from every error and log line.
	secrets []string
}

// parse parses args into fs, allowing flags after positional arguments,
// and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errFlags
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

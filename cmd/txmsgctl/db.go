package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/redact"
	"github.com/txmsg/txmsg/txmsg"
)

// common are the flags every command takes: where the database is and
// what its tables are called.
type common struct {
	dsn          string
	barrierTable string
	inboxTable   string
	parkedTable  string
	failingTable string
	outboxTable  string
	// instancesTable and historyTable are the fleet's tables (package
	// fleet): the instances' heartbeats, the dashboard's history.
	instancesTable string
	historyTable   string
	timeout        time.Duration
	verbose        bool
}

// newFlags returns the flag set of command name, with the common flags;
// synopsis is its usage line.
func newFlags(e *env, name, synopsis string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("txmsgctl "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: txmsgctl %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	c := &common{}
	// No default from $TXMSG_DSN here: the usage text would print it.
	fs.StringVar(&c.dsn, "dsn", "", "MySQL/MariaDB DSN, user:password@tcp(host:port)/dbname (default $TXMSG_DSN)")
	fs.StringVar(&c.barrierTable, "barrier-table", checker.DefaultTable, "barrier table")
	fs.StringVar(&c.inboxTable, "inbox-table", txmsg.DefaultInboxTable, "inbox table")
	fs.StringVar(&c.parkedTable, "parked-table", txmsg.DefaultParkedTable, "table of parked messages")
	fs.StringVar(&c.failingTable, "failing-table", txmsg.DefaultFailingTable, "table of messages whose handler is failing")
	fs.StringVar(&c.outboxTable, "outbox-table", outbox.DefaultTable, "outbox table (its relays' tables are <name>_lease and <name>_relay)")
	fs.StringVar(&c.instancesTable, "instances-table", fleet.DefaultTable, "instance table: the heartbeats of consumers, sweepers and producers")
	fs.StringVar(&c.historyTable, "history-table", fleet.DefaultHistoryTable, "the dashboard's history table (its lease table is <name>_lease)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.BoolVar(&c.verbose, "v", false, "log what the components do (debug level)")
	return fs, c
}

// conn is an open database with txmsg's components over it.
type conn struct {
	db      *gorm.DB
	display string // the DSN without its password
	dbName  string
	chk     *checker.Checker
	inbox   *txmsg.Inbox
	ob      *outbox.Outbox
}

// open resolves the DSN, connects and builds the components. It registers
// the DSN's password with e, so no later error can print it.
func (c *common) open(ctx context.Context, e *env) (*conn, error) {
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelDebug
	}
	e.log = slog.New(slog.NewTextHandler(scrubWriter{e}, &slog.HandlerOptions{Level: level}))
	dsn := c.dsn
	if dsn == "" {
		dsn = e.getenv("TXMSG_DSN")
	}
	if dsn == "" {
		return nil, usageError("no database: pass -dsn or set TXMSG_DSN")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		e.addSecret(guessPassword(dsn))
		return nil, usageError("-dsn is not a valid MySQL DSN (want user:password@tcp(host:port)/dbname): %v", err)
	}
	e.addSecret(cfg.Passwd)
	if cfg.DBName == "" {
		return nil, usageError("the DSN names no database: add /dbname after the address")
	}
	cfg.ParseTime = true // txmsg's models hold time.Time
	display := redactedDSN(cfg)
	db, err := gorm.Open(gmysql.Open(cfg.FormatDSN()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s: %w", display, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s: %w", display, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("cannot connect to %s: %w", display, err)
	}
	sqlDB.SetMaxOpenConns(4)
	k := &conn{db: db, display: display, dbName: cfg.DBName}
	if k.chk, err = checker.New(db, checker.Config{Table: c.barrierTable, Logger: e.log}); err == nil {
		if k.inbox, err = txmsg.NewInbox(db, txmsg.InboxConfig{Table: c.inboxTable, ParkedTable: c.parkedTable, FailingTable: c.failingTable, Logger: e.log}); err == nil {
			k.ob, err = outbox.New(db, outbox.Config{Table: c.outboxTable, Logger: e.log})
		}
	}
	if err != nil {
		_ = sqlDB.Close()
		return nil, usageError("%v", err)
	}
	return k, nil
}

func (k *conn) close() {
	if sqlDB, err := k.db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// errNoTable means a table the command needs does not exist.
var errNoTable = errors.New("table not found")

// has reports whether table exists in the connected database.
func (k *conn) has(ctx context.Context, table string) bool {
	return k.db.WithContext(ctx).Migrator().HasTable(table)
}

// need returns an error naming table and the flag that names it when the
// table does not exist.
func (k *conn) need(ctx context.Context, table, flagName string) error {
	if k.has(ctx, table) {
		return nil
	}
	return fmt.Errorf("%w: %q in database %q; create it with \"txmsgctl migrate\", or name yours with -%s",
		errNoTable, table, k.dbName, flagName)
}

// redactedDSN is cfg as a DSN with the password masked.
func redactedDSN(cfg *mysql.Config) string { return redact.DSN(cfg) }

// guessPassword finds what may be the password in a DSN the driver cannot
// parse: the text between the first ':' and the last '@' of the part
// before the address, so that errors about it do not print it.
func guessPassword(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return ""
	}
	colon := strings.Index(dsn[:at], ":")
	if colon < 0 {
		return ""
	}
	return dsn[colon+1 : at]
}

// addSecret registers a value to scrub from output, as a safety net:
// txmsgctl never formats a DSN with its password, and the driver's errors
// do not quote it. Values shorter than minSecret are left alone, since
// masking every occurrence of a short word ("txmsg") would garble table
// names and messages.
func (e *env) addSecret(s string) {
	if len(s) >= minSecret {
		e.secrets = append(e.secrets, s)
	}
}

// minSecret is the length from which addSecret masks a value.
const minSecret = 8

// scrub masks every registered secret in s.
func (e *env) scrub(s string) string {
	for _, sec := range e.secrets {
		s = strings.ReplaceAll(s, sec, "****")
	}
	return s
}

// scrubWriter writes to stderr through e.scrub.
type scrubWriter struct{ e *env }

func (w scrubWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.e.stderr, w.e.scrub(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

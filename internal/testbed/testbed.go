// Package testbed gives txmsg's tests the real services they run against:
// the RocketMQ name server and broker and the MySQL/MariaDB server that
// scripts/rocketmq.sh and scripts/mysql.sh start. Each test gets its own
// database and its own topics.
//
// When a service does not answer, tests skip with a message naming the
// script to run; with TXMSG_REQUIRE_SERVICES=1 (as `make test` and CI set)
// they fail instead.
package testbed

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/go-sql-driver/mysql"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Defaults match rmqproc (scripts/rocketmq.sh) and scripts/mysql.sh.
const (
	DefaultNameServer = rmqproc.DefaultNameServer
	DefaultBroker     = rmqproc.DefaultBroker
	DefaultDSN        = "txmsg:txmsg@tcp(127.0.0.1:13306)/txmsg_test?parseTime=true&loc=UTC&charset=utf8mb4"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// NameServer returns TXMSG_NAMESRV or the default.
func NameServer() string { return env("TXMSG_NAMESRV", DefaultNameServer) }

// Broker returns TXMSG_BROKER (the broker's address, for admin calls) or
// the default.
func Broker() string { return env("TXMSG_BROKER", DefaultBroker) }

// MySQLPort returns TXMSG_MYSQL_PORT or the default port of the test bed's
// own server (scripts/mysql.sh).
func MySQLPort() string { return env("TXMSG_MYSQL_PORT", "13306") }

// DSN returns TXMSG_DSN or the default.
func DSN() string { return env("TXMSG_DSN", DefaultDSN) }

// Required reports whether missing services fail tests instead of skipping
// them.
func Required() bool { return os.Getenv("TXMSG_REQUIRE_SERVICES") == "1" }

func unavailable(t testing.TB, what, script string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable (%v); start it with %s", what, err, script)
	if Required() {
		t.Fatal(msg + " (TXMSG_REQUIRE_SERVICES=1)")
	}
	t.Skip(msg)
}

func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

var quietOnce sync.Once

// QuietClientLogs silences the MySQL driver's connection-loss logs, which
// tests that cut connections on purpose would fill. It leaves
// rocketmq-client-go's logger alone: txmsg components install their own
// bridge to it, and changing that process-wide logger while clients run is
// a data race.
func QuietClientLogs() {
	quietOnce.Do(func() { _ = mysql.SetLogger(log.New(io.Discard, "", 0)) })
}

// RequireBroker skips or fails t when the name server or broker does not
// answer. In a run made for a special broker that t did not ask for (see
// [SpecialRun]) it skips t.
func RequireBroker(t testing.TB) {
	t.Helper()
	skipUnlessFor(t)
	QuietClientLogs()
	// Before any client of the test binary starts: the client's logger is
	// a process global that cannot be replaced safely later.
	rmqlog.Install(slog.Default(), slog.LevelError)
	for _, addr := range []string{NameServer(), Broker()} {
		if err := dial(addr); err != nil {
			unavailable(t, "RocketMQ at "+addr, "scripts/rocketmq.sh start", err)
		}
	}
}

var (
	adminMu   sync.Mutex
	adminClis = map[string]admin.Admin{}
)

// sharedAdmin returns one admin client per name server for the whole
// process. Admin clients are never closed: closing one shuts down the
// client it shares.
func sharedAdmin(ns string) (admin.Admin, error) {
	adminMu.Lock()
	defer adminMu.Unlock()
	if a, ok := adminClis[ns]; ok {
		return a, nil
	}
	rmqlog.Install(slog.Default(), slog.LevelError)
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{ns})))
	if err != nil {
		return nil, err
	}
	adminClis[ns] = a
	return a, nil
}

// ClusterNameServer returns TXMSG_CLUSTER_NAMESRV: the name server of the
// two-broker cluster (scripts/rocketmq.sh start --cluster), or "".
func ClusterNameServer() string { return os.Getenv("TXMSG_CLUSTER_NAMESRV") }

// ClusterBroker is one broker of the cluster.
type ClusterBroker = rmqproc.Broker

// ClusterBrokers returns TXMSG_CLUSTER_BROKERS, name=host:port comma
// separated (default broker-a=127.0.0.1:30911,broker-b=127.0.0.1:31911);
// entries that are not name=host:port are left out.
func ClusterBrokers() []ClusterBroker {
	var out []ClusterBroker
	for _, part := range strings.Split(env("TXMSG_CLUSTER_BROKERS", rmqproc.DefaultClusterBrokers), ",") {
		if bs, err := rmqproc.ParseBrokers(part); err == nil {
			out = append(out, bs...)
		}
	}
	return out
}

// RequireCluster skips t unless TXMSG_CLUSTER_NAMESRV names the cluster's
// name server, checks that it and every broker answer, and points this
// test and its child processes at the cluster: TXMSG_NAMESRV becomes the
// cluster's name server and TXMSG_BROKER broker-a, and [Topic] creates
// topics on every broker. It uses t.Setenv: such tests cannot be
// parallel. A run with TXMSG_CLUSTER_NAMESRV set is for such tests alone:
// the others skip (see [SpecialRun]).
func RequireCluster(t *testing.T) []ClusterBroker {
	t.Helper()
	ns := ClusterNameServer()
	if ns == "" {
		t.Skip("needs the two-broker cluster: set TXMSG_CLUSTER_NAMESRV (and TXMSG_CLUSTER_BROKERS) to name it; make test-cluster starts one and does")
	}
	declare(t, clusterRun)
	brokers := ClusterBrokers()
	if len(brokers) < 2 {
		t.Fatalf("TXMSG_CLUSTER_BROKERS must name two brokers as name=host:port,...; got %q", os.Getenv("TXMSG_CLUSTER_BROKERS"))
	}
	t.Setenv("TXMSG_NAMESRV", ns)
	t.Setenv("TXMSG_BROKER", brokers[0].Addr)
	RequireBroker(t)
	for _, b := range brokers {
		if err := dial(b.Addr); err != nil {
			t.Fatalf("cluster broker %s at %s is not reachable (%v); start the cluster with scripts/rocketmq.sh start --cluster", b.Name, b.Addr, err)
		}
	}
	return brokers
}

// topicBrokers are the brokers a new topic is created on: every broker of
// the cluster when the tests run against it, else the test broker (the
// HA form: createOnHA).
func topicBrokers() []string {
	if ns := ClusterNameServer(); ns != "" && ns == NameServer() {
		var addrs []string
		for _, b := range ClusterBrokers() {
			addrs = append(addrs, b.Addr)
		}
		return addrs
	}
	return []string{Broker()}
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// Suffix returns a short random hex string.
func Suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Name returns a name unique to this test and run, built from prefix and
// the test's name, safe as a topic or group name.
func Name(t testing.TB, prefix string) string {
	n := unsafeChars.ReplaceAllString(t.Name(), "_")
	if len(n) > 60 {
		n = n[len(n)-60:]
	}
	return strings.Trim(prefix+"_"+n, "_") + "_" + Suffix()
}

// Topic creates a topic unique to t with 4 queues on the test broker and
// waits until the name server routes it.
func Topic(t testing.TB) string {
	t.Helper()
	RequireBroker(t)
	topic := Name(t, "txmsg")
	if err := CreateTopic(context.Background(), topic, 4); err != nil {
		unavailable(t, "RocketMQ topic creation", "scripts/rocketmq.sh start", err)
	}
	return topic
}

// CreateTopic creates topic on the test broker (on every broker of the
// cluster, see [RequireCluster]; on every master and slave of the HA form,
// see [RequireHA]) and waits until the name server returns a
// route for it to each of them.
func CreateTopic(ctx context.Context, topic string, queues int) error {
	if ns := haNameServer(); ns != "" && ns == NameServer() {
		return createOnHA(ctx, ns, topic, queues)
	}
	return CreateTopicOn(ctx, NameServer(), topicBrokers(), topic, queues)
}

// CreateTopicOn creates topic with queues read and write queues on each
// broker of brokers (addresses) and waits up to 30 s until the name server
// ns routes it to as many brokers.
func CreateTopicOn(ctx context.Context, ns string, brokers []string, topic string, queues int) error {
	adm, err := sharedAdmin(ns)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, addr := range brokers {
		err = adm.CreateTopic(ctx,
			admin.WithTopicCreate(topic),
			admin.WithBrokerAddrCreate(addr),
			admin.WithReadQueueNums(queues),
			admin.WithWriteQueueNums(queues))
		if err != nil {
			return fmt.Errorf("create topic %s on %s: %w (is RocketMQ running? scripts/rocketmq.sh start)", topic, addr, err)
		}
	}
	return waitRouted(ctx, adm, topic, len(brokers))
}

// waitRouted waits until the name server routes topic to n broker names.
func waitRouted(ctx context.Context, adm admin.Admin, topic string, n int) error {
	for {
		mqs, err := adm.FetchPublishMessageQueues(ctx, topic)
		names := map[string]bool{}
		for _, mq := range mqs {
			names[mq.BrokerName] = true
		}
		if err == nil && len(names) >= n {
			return nil
		}
		if err == nil && len(names) > 0 {
			// The admin client caches the first route it fetched.
			return fmt.Errorf("topic %s is routed to %d of %d brokers after creation", topic, len(names), n)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s has no route after creation: %v", topic, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DeleteTopicOn deletes topic from each broker of brokers (addresses) and
// from the name server ns.
func DeleteTopicOn(ctx context.Context, ns string, brokers []string, topic string) error {
	adm, err := sharedAdmin(ns)
	if err != nil {
		return err
	}
	var errs []error
	for _, addr := range brokers {
		if err := adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(addr),
			admin.WithNameSrvAddr([]string{ns})); err != nil {
			errs = append(errs, fmt.Errorf("delete topic %s on %s: %w", topic, addr, err))
		}
	}
	return errors.Join(errs...)
}

// DefaultsEnv names the environment variable that makes every test
// database use the server's defaults (see [ServerDefaults]) when set to 1.
const DefaultsEnv = "TXMSG_TEST_DB_DEFAULTS"

// UseServerDefaults reports whether TXMSG_TEST_DB_DEFAULTS=1 asks for every
// test database to be created with the server's defaults.
func UseServerDefaults() bool { return os.Getenv(DefaultsEnv) == "1" }

// DBOption changes how [DB] and [DBWithDSN] create a test database.
type DBOption func(*dbOptions)

type dbOptions struct {
	serverDefaults bool
}

// ServerDefaults creates the test database the way a DBA does, with a plain
// CREATE DATABASE: the server's default character set and collation
// (utf8mb4_general_ci on MariaDB, utf8mb4_0900_ai_ci on MySQL 8), and
// connections that keep the server's default isolation level: any
// tx_isolation or transaction_isolation parameter of TXMSG_DSN is dropped.
// Without it, test databases use utf8mb4_bin.
func ServerDefaults() DBOption { return func(o *dbOptions) { o.serverDefaults = true } }

// isolationParams are DSN parameters that set the session's isolation level.
var isolationParams = []string{"tx_isolation", "transaction_isolation"}

// DBPrefix starts the name of every database the tests, the godoc
// examples, the demo, txbench and txchaos create: scripts/mysql.sh grants
// the txmsg user these only (see [GrantStatements]).
const DBPrefix = "txmsg_"

// DB returns a gorm handle on a fresh database made for t and dropped when
// t ends. With TXMSG_TEST_DB_DEFAULTS=1 every database is made as with
// [ServerDefaults].
func DB(t testing.TB, opts ...DBOption) *gorm.DB {
	t.Helper()
	db, _ := DBWithDSN(t, opts...)
	return db
}

// DBWithDSN is DB that also returns the new database's DSN, for tests that
// open further connections (child processes, proxies). Like [RequireBroker]
// it skips t in a run made for a special broker t did not ask for.
func DBWithDSN(t testing.TB, opts ...DBOption) (*gorm.DB, string) {
	t.Helper()
	skipUnlessFor(t)
	o := dbOptions{serverDefaults: UseServerDefaults()}
	for _, opt := range opts {
		opt(&o)
	}
	QuietClientLogs() // before any DSN parsing: it sets the driver's logger
	base, err := mysql.ParseDSN(DSN())
	if err != nil {
		t.Fatalf("TXMSG_DSN is not a valid MySQL DSN: %v", err)
	}
	if o.serverDefaults {
		for k := range base.Params {
			for _, p := range isolationParams {
				if strings.EqualFold(k, p) {
					delete(base.Params, k)
				}
			}
		}
	}
	if err := dial(base.Addr); err != nil {
		unavailable(t, "MySQL/MariaDB at "+base.Addr, "scripts/mysql.sh start", err)
	}
	admin, err := Open(base.FormatDSN())
	if err != nil {
		unavailable(t, "MySQL/MariaDB at "+base.Addr, "scripts/mysql.sh start", err)
	}
	// txmsg_ first: scripts/mysql.sh grants the test user txmsg_* databases
	// only. The end of the name (test name and random suffix) is kept.
	name := strings.TrimLeft(strings.ToLower(Name(t, "")), "_-")
	if len(name) > 64-len(DBPrefix) {
		name = strings.TrimLeft(name[len(name)-(64-len(DBPrefix)):], "_-")
	}
	name = DBPrefix + name
	create := "CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if o.serverDefaults {
		create = "CREATE DATABASE `" + name + "`"
	}
	if err := admin.Exec(create).Error; err != nil {
		t.Fatal(grantError(DSN(), "create test database "+name, err))
	}
	cfg := base.Clone()
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := Open(dsn)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
		_ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`").Error
		if sqlDB, err := admin.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return db, dsn
}

// Open opens dsn with gorm, silent, and pings it.
func Open(dsn string) (*gorm.DB, error) {
	QuietClientLogs()
	db, err := gorm.Open(gmysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	sqlDB.SetMaxOpenConns(50)
	return db, nil
}

// LogWriter returns a writer whose every Write is one t.Log line, for
// loggers and tools that take an io.Writer: their output shows with the
// test's, when it fails or runs with -v.
func LogWriter(t testing.TB) io.Writer { return logWriter{t} }

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// OverConn opens dsn as a *sql.DB and gives it to gorm as its connection
// pool (mysql.New(mysql.Config{Conn: ...})), the way a program that
// already holds a *sql.DB does; gorm then knows no DSN. It is closed when
// t ends.
func OverConn(t testing.TB, dsn string) *gorm.DB {
	t.Helper()
	QuietClientLogs()
	sqlDB, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(gmysql.New(gmysql.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("gorm over *sql.DB: %v", err)
	}
	return db
}

// WithoutParseTime returns handles on dsn's database whose connections
// lack parseTime=true: "dsn", opened from the DSN, and "conn", over a
// *sql.DB ([OverConn]). They are closed when t ends.
func WithoutParseTime(t testing.TB, dsn string) map[string]*gorm.DB {
	t.Helper()
	QuietClientLogs()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	cfg.ParseTime = false
	plain := cfg.FormatDSN()
	fromDSN, err := Open(plain)
	if err != nil {
		t.Fatalf("open without parseTime: %v", err)
	}
	t.Cleanup(func() {
		if s, err := fromDSN.DB(); err == nil {
			_ = s.Close()
		}
	})
	return map[string]*gorm.DB{"dsn": fromDSN, "conn": OverConn(t, plain)}
}

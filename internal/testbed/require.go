package testbed

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
)

// Tests choose themselves: a test that needs more than the everyday test
// bed (the broker and database of scripts/rocketmq.sh and
// scripts/mysql.sh) says so by calling one of the helpers below first, and
// skips itself, with a message naming what would run it, when the run's
// environment does not provide it. No make target names a test: each
// selects packages and sets the environment.
//
// A run whose broker is special is for the tests that ask for that broker
// alone:
//
//   - TXMSG_CLUSTER_NAMESRV set: the two-broker cluster ([RequireCluster]);
//   - TXMSG_HA set (async or sync): the HA form, two groups of a master
//     and a slave that tests kill and restart ([RequireHA]);
//   - TXMSG_BROKER_RESTART=1: a broker of the run's own that tests kill and
//     restart ([RequireRestartableBroker]);
//   - TXMSG_EXPIRING_BROKER=1: a broker that deletes its commit-log files
//     within seconds ([RunsOnExpiringBroker]);
//   - TXMSG_NAMESRV and TXMSG_BROKER naming a broker the test bed started
//     with RocketMQ's stock settings (scripts/rocketmq.sh --stock start):
//     no variable of its own, the broker's config file says so
//     ([RunsOnStockBroker]).
//
// In such a run every other test skips as soon as it asks the test bed for
// a service ([RequireBroker], [DB], [DBWithDSN], [Topic], [Observe]), and
// [RunWithExamples] skips the package's examples: they run in make test.
// Tests that use no service run in every run.

// specialBroker is a kind of broker a run can be made for.
type specialBroker struct {
	what   string // what the broker is, for messages
	env    string // the environment that makes a run one for it, for messages
	target string // the make target that makes such a run
	on     func() bool
}

var (
	clusterRun = &specialBroker{
		what:   "the two-broker cluster",
		env:    "TXMSG_CLUSTER_NAMESRV is set",
		target: "make test-cluster",
		on:     func() bool { return ClusterNameServer() != "" },
	}
	restartRun = &specialBroker{
		what:   "a broker of the run's own that tests kill and restart",
		env:    BrokerRestartEnv + "=1",
		target: "make test-broker-faults",
		on:     func() bool { return os.Getenv(BrokerRestartEnv) == "1" },
	}
	expiringRun = &specialBroker{
		what:   "a broker that deletes its commit-log files within seconds",
		env:    ExpiringBrokerEnv + "=1",
		target: "make test-broker-faults",
		on:     func() bool { return os.Getenv(ExpiringBrokerEnv) == "1" },
	}
	haRun = &specialBroker{
		what:   "the HA form (two master/slave groups)",
		env:    HAEnv + " is set",
		target: "make test-ha",
		on:     func() bool { return os.Getenv(HAEnv) != "" },
	}
	stockRun = &specialBroker{
		what:   "a broker with RocketMQ's stock settings",
		env:    "TXMSG_BROKER names a broker started with scripts/rocketmq.sh --stock",
		target: "make test-stock",
		on:     stockBroker,
	}
	specialBrokers = []*specialBroker{clusterRun, haRun, restartRun, expiringRun, stockRun}
)

// ExpiringBrokerEnv, set to 1, says the test broker deletes its
// commit-log files within seconds (scripts/rocketmq/expiring.conf), so a
// queue's first offset soon leaves 0. Meant for a broker of the run's own
// (make test-broker-faults starts one).
const ExpiringBrokerEnv = "TXMSG_EXPIRING_BROKER"

// specialRun returns the special broker this run is for, or nil for an
// everyday run.
func specialRun() *specialBroker {
	for _, s := range specialBrokers {
		if s.on() {
			return s
		}
	}
	return nil
}

// SpecialRun describes the special broker this run is made for (see the
// helpers of this file), or returns "" in an everyday run.
func SpecialRun() string {
	if s := specialRun(); s != nil {
		return fmt.Sprintf("%s (%s)", s.what, s.env)
	}
	return ""
}

type declaration struct {
	test   string
	broker *specialBroker
}

// declared holds which tests asked for which special broker.
var declared sync.Map

// declare records that t runs on s.
func declare(t testing.TB, s *specialBroker) {
	declared.Store(declaration{t.Name(), s}, true)
}

// asked reports whether t, or a test it is a subtest of, declared s.
func asked(t testing.TB, s *specialBroker) bool {
	name := t.Name()
	for {
		if _, ok := declared.Load(declaration{name, s}); ok {
			return true
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
	}
}

// skipUnlessFor skips t in a run made for a special broker t did not ask
// for.
func skipUnlessFor(t testing.TB) {
	t.Helper()
	if s := specialRun(); s != nil && !asked(t, s) {
		t.Skipf("this run is for the tests that need %s (%s); this test needs no such broker and runs in make test", s.what, s.env)
	}
}

// RunsOnExpiringBroker says that t runs on a broker that deletes its
// commit-log files within seconds ([ExpiringBrokerEnv]) as well as on the
// everyday broker, and reports whether this run's broker is such a one.
// Call it before t asks for any service.
func RunsOnExpiringBroker(t testing.TB) bool {
	t.Helper()
	declare(t, expiringRun)
	return expiringRun.on()
}

// SkipOnServerDefaults skips t in the run on databases made with the
// server's defaults ([DefaultsEnv]=1, make test-defaults), saying why:
// for a test about memory, load or crashes, which no collation or
// isolation level changes, that second run would only repeat the first.
func SkipOnServerDefaults(t testing.TB, why string) {
	t.Helper()
	if UseServerDefaults() {
		t.Skipf("not run on databases with the server's defaults (%s=1): %s", DefaultsEnv, why)
	}
}

// stockForms caches, per name server, broker and cache, whether the test
// bed started that broker in the stock form.
var stockForms sync.Map

// stockBroker reports whether the broker of TXMSG_NAMESRV and
// TXMSG_BROKER is one the test bed started with RocketMQ's stock settings
// ([rmqproc.Config.Stock]). The everyday ports never are.
func stockBroker() bool {
	if NameServer() == DefaultNameServer && Broker() == DefaultBroker {
		return false
	}
	key := strings.Join([]string{NameServer(), Broker(), os.Getenv("TXMSG_CACHE"), os.Getenv("TXMSG_RMQ_VERSION")}, "|")
	if v, ok := stockForms.Load(key); ok {
		return v.(bool)
	}
	stock := false
	if cfg, err := rmqproc.FromEnv(false); err == nil {
		cfg.ExtraConf = "" // a stock broker has none; not needed to find it
		cfg.Log = io.Discard
		if in, err := rmqproc.New(cfg); err == nil {
			stock = in.Stock()
		}
	}
	stockForms.Store(key, stock)
	return stock
}

// RunsOnStockBroker says that t runs on a broker with RocketMQ's stock
// settings (make test-stock: transaction check-backs after 6 s, 30 s
// apart, on RocketMQ 5.3.3) as well as on the everyday broker, and reports
// whether this run's broker is such a one. Call it before t asks for any
// service. On a stock broker it skips t, or fails it with
// TXMSG_REQUIRE_SERVICES=1, when the broker's disk is fuller than a stock
// broker works with ([rmqproc.CheckStockDisk]).
func RunsOnStockBroker(t testing.TB) bool {
	t.Helper()
	declare(t, stockRun)
	if !stockRun.on() {
		return false
	}
	if err := rmqproc.CheckStockDisk(LocalBroker(t).Dir()); err != nil {
		if Required() {
			t.Fatal(err.Error() + " (TXMSG_REQUIRE_SERVICES=1)")
		}
		t.Skip(err.Error())
	}
	return true
}

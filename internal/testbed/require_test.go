package testbed_test

import (
	"strings"
	"testing"

	"github.com/txmsg/txmsg/internal/testbed"
)

// outcome runs fn as a subtest of t named name and reports whether it
// skipped, and with what message.
func outcome(t *testing.T, name string, fn func(t *testing.T)) (skipped bool) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		fn(t)
	})
	return skipped
}

// In a run made for a special broker, a test that did not ask for it skips
// as soon as it asks for a service; one that did, and its subtests, go on.
// Outside such a run, asking changes nothing.
func TestSpecialRunIsForTheTestsThatAskForIt(t *testing.T) {
	testbed.RequireBroker(t)
	t.Setenv(testbed.ExpiringBrokerEnv, "")
	t.Setenv("TXMSG_CLUSTER_NAMESRV", "")
	t.Setenv(testbed.BrokerRestartEnv, "")
	if testbed.SpecialRun() != "" {
		t.Fatalf("SpecialRun %q without its environment", testbed.SpecialRun())
	}
	if outcome(t, "everyday", func(t *testing.T) {
		if testbed.RunsOnExpiringBroker(t) {
			t.Error("RunsOnExpiringBroker reports an expiring broker without its environment")
		}
		testbed.RequireBroker(t)
	}) {
		t.Fatal("a test skipped in an everyday run")
	}

	t.Setenv(testbed.ExpiringBrokerEnv, "1")
	if got := testbed.SpecialRun(); !strings.Contains(got, testbed.ExpiringBrokerEnv) {
		t.Fatalf("SpecialRun %q, want it to name %s", got, testbed.ExpiringBrokerEnv)
	}
	if !outcome(t, "undeclared broker", func(t *testing.T) { testbed.RequireBroker(t) }) {
		t.Error("a test that did not ask for the expiring broker reached it")
	}
	if !outcome(t, "undeclared database", func(t *testing.T) { testbed.DB(t) }) {
		t.Error("a test that did not ask for the expiring broker got a database in its run")
	}
	if outcome(t, "declared", func(t *testing.T) {
		if !testbed.RunsOnExpiringBroker(t) {
			t.Error("RunsOnExpiringBroker does not report the expiring broker")
		}
		testbed.RequireBroker(t)
		if outcome(t, "subtest", func(t *testing.T) { testbed.RequireBroker(t) }) {
			t.Error("a subtest of a test that asked for the expiring broker skipped")
		}
	}) {
		t.Error("a test that asked for the expiring broker skipped")
	}
}

func TestRequirementsSkipWithoutTheirEnvironment(t *testing.T) {
	t.Setenv("TXMSG_CLUSTER_NAMESRV", "")
	t.Setenv(testbed.BrokerRestartEnv, "")
	t.Setenv(testbed.DefaultsEnv, "1")
	for name, fn := range map[string]func(t *testing.T){
		"cluster":              func(t *testing.T) { testbed.RequireCluster(t) },
		"restartable broker":   func(t *testing.T) { testbed.RequireRestartableBroker(t) },
		"server defaults pass": func(t *testing.T) { testbed.SkipOnServerDefaults(t, "a test of memory") },
	} {
		if !outcome(t, name, fn) {
			t.Errorf("%s: the test ran without its environment", name)
		}
	}
	t.Setenv(testbed.DefaultsEnv, "")
	if outcome(t, "first pass", func(t *testing.T) { testbed.SkipOnServerDefaults(t, "a test of memory") }) {
		t.Error("SkipOnServerDefaults skipped outside the server-defaults pass")
	}
}

package testbed

import (
	"context"
	"testing"

	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
)

// BrokerRestartEnv, set to 1, lets a test SIGKILL and restart the broker
// of TXMSG_NAMESRV and TXMSG_BROKER through [rmqproc], which finds its
// processes from those and TXMSG_CACHE. Meant for a broker of the test's
// own (make test-broker-faults starts one): everything else on that broker
// fails while it is down.
const BrokerRestartEnv = "TXMSG_BROKER_RESTART"

// RequireRestartableBroker skips t unless BrokerRestartEnv is 1, and fails
// it when the broker is unreachable or the test bed did not start the
// broker of TXMSG_NAMESRV and TXMSG_BROKER. A run with BrokerRestartEnv=1
// is for such tests alone: the others skip (see [SpecialRun]).
func RequireRestartableBroker(t *testing.T) {
	t.Helper()
	if !restartRun.on() {
		t.Skipf("needs a broker of its own that it may kill and restart: set %s=1, with TXMSG_NAMESRV, TXMSG_BROKER and TXMSG_CACHE naming it; "+
			"make test-broker-faults does (docs/testing.md)", BrokerRestartEnv)
	}
	declare(t, restartRun)
	RequireBroker(t)
	if !LocalBroker(t).Owns("") {
		t.Fatalf("the broker at %s was not started by the test bed from %s: start it with scripts/rocketmq.sh start (same TXMSG_NAMESRV, TXMSG_BROKER and TXMSG_CACHE)",
			Broker(), LocalBroker(t).Dir())
	}
}

// LocalBroker returns the processes of the name server and broker of
// TXMSG_NAMESRV and TXMSG_BROKER ([rmqproc.FromEnv]), logging to t.
func LocalBroker(t testing.TB) *rmqproc.Instance {
	t.Helper()
	return instance(t, false)
}

// ClusterProcs returns the processes of the two-broker cluster of
// TXMSG_CLUSTER_NAMESRV and TXMSG_CLUSTER_BROKERS (make test-cluster),
// logging to t.
func ClusterProcs(t testing.TB) *rmqproc.Instance {
	t.Helper()
	return instance(t, true)
}

func instance(t testing.TB, cluster bool) *rmqproc.Instance {
	t.Helper()
	cfg, err := rmqproc.FromEnv(cluster)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Log = LogWriter(t)
	in, err := rmqproc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// KillBroker SIGKILLs the broker of [LocalBroker] and fails t when it
// cannot.
func KillBroker(t testing.TB) {
	t.Helper()
	if err := LocalBroker(t).Kill(""); err != nil {
		t.Fatal(err)
	}
}

// StartBroker starts the broker of [LocalBroker] again and waits until it
// takes messages; it fails t when it cannot.
func StartBroker(t testing.TB) {
	t.Helper()
	if err := LocalBroker(t).Start(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
}

// KillClusterBroker SIGKILLs broker name of the cluster ([ClusterProcs]).
func KillClusterBroker(t testing.TB, name string) {
	t.Helper()
	if err := ClusterProcs(t).Kill(name); err != nil {
		t.Fatal(err)
	}
}

// StartClusterBroker starts broker name of the cluster again and waits
// until every broker of the cluster takes messages.
func StartClusterBroker(t testing.TB, name string) {
	t.Helper()
	if err := ClusterProcs(t).Start(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}

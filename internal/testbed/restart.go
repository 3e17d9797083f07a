package testbed

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// BrokerRestartEnv, set to 1, lets a test SIGKILL and restart the broker
// with scripts/rocketmq.sh, which finds it from the test's environment
// (TXMSG_NAMESRV, TXMSG_RMQ_BROKER_PORT, TXMSG_CACHE). Meant for a broker
// of the test's own (make test-broker-faults starts one): everything else
// on that broker fails while it is down.
const BrokerRestartEnv = "TXMSG_BROKER_RESTART"

// RequireRestartableBroker skips t unless BrokerRestartEnv is 1, and fails
// it when the broker is unreachable or scripts/rocketmq.sh did not start
// the broker of TXMSG_NAMESRV. A run with BrokerRestartEnv=1 is for such
// tests alone: the others skip (see [SpecialRun]).
func RequireRestartableBroker(t *testing.T) {
	t.Helper()
	if !restartRun.on() {
		t.Skipf("needs a broker of its own that it may kill and restart: set %s=1, with TXMSG_NAMESRV, TXMSG_BROKER, TXMSG_RMQ_BROKER_PORT and TXMSG_CACHE naming it; "+
			"make test-broker-faults does (docs/testing.md)", BrokerRestartEnv)
	}
	declare(t, restartRun)
	RequireBroker(t)
	RocketMQScript(t, "owns")
}

// RocketMQScript runs scripts/rocketmq.sh verb [args] with the test's
// environment and fails t when it fails.
func RocketMQScript(t *testing.T, verb string, args ...string) {
	t.Helper()
	runRocketMQScript(t, nil, append([]string{verb}, args...))
}

// ClusterScript runs scripts/rocketmq.sh verb [broker] on the two-broker
// cluster of make test-cluster and fails t when it fails.
func ClusterScript(t *testing.T, args ...string) {
	t.Helper()
	runRocketMQScript(t, []string{"TXMSG_RMQ_BROKERS=2", "TXMSG_ROCKETMQ_MODE=jar"}, args)
}

func runRocketMQScript(t *testing.T, env, args []string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command(filepath.Join(filepath.Dir(file), "..", "..", "scripts", "rocketmq.sh"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/rocketmq.sh %v: %v\n%s", args, err, out)
	}
}

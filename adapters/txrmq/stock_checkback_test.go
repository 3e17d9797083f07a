package txrmq

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// A producer SIGKILLed after its local commit never sends END_TRANSACTION;
// the broker's check-back, answered by another producer of the group,
// commits the event, on the broker's own schedule. The everyday test
// broker checks every second. A broker with RocketMQ's stock settings (make
// test-stock; RocketMQ 5.3.3) checks a half message once it is 6 s old
// (transactionTimeOut), on passes 30 s apart (transactionCheckInterval): the
// event arrives 6 to 36 s after its producer died, never sooner.
func TestTransactionalCheckBackCommitsLostEnd(t *testing.T) {
	t.Parallel()
	stock := testbed.RunsOnStockBroker(t)
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	e.start(t, e.db, e.chk, nil) // answers the check-back: COMMIT

	id := txmsg.NewID()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTransactionalKeyOrderChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), orderChildEnv+"="+strings.Join([]string{e.dsn, e.topic, e.group, id, "account-1"}, "|"))
	out, err := cmd.CombinedOutput()
	died := time.Now()
	require.Error(t, err)
	require.Contains(t, string(out), "KILL-POINT after-local-commit", "child output:\n%s", out)
	require.Equal(t, checker.StateCommitted, e.barrier(t, id), "the event is committed in the database")

	wait := time.Minute
	if stock {
		wait = 3 * time.Minute
	}
	obs.DeliveredWithin(t, id, wait)
	took := time.Since(died)
	t.Logf("a check-back committed the event %s after its producer died before END_TRANSACTION (stock broker: %v)", took.Round(100*time.Millisecond), stock)
	if stock {
		require.GreaterOrEqual(t, took, 5*time.Second,
			"a stock broker checks a half message back only once it is transactionTimeOut (6 s) old: is the broker's configuration stock?")
	}
}

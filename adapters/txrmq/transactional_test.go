package txrmq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func createOrder(sku string) txmsg.LocalTx {
	return func(ctx context.Context, tx *gorm.DB) error {
		return tx.Create(&order{MsgID: txmsg.NewID(), SKU: sku}).Error
	}
}

// The conformance suite (conformance_test.go) covers delivery; this test
// covers what only transactional mode writes: the barrier row, committed
// with the business rows or rolled back with them, and none for a message
// rejected before the half send.
func TestTransactionalBarrierRows(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	tr := e.start(t, e.db, e.chk, nil)
	ctx := context.Background()

	committed := &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}
	receipt, err := tr.Transact(ctx, committed, createOrder("ok"))
	require.NoError(t, err)
	require.NotEmpty(t, receipt.BrokerMessageID)
	require.Equal(t, checker.StateCommitted, e.barrier(t, committed.ID))

	failed := &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}
	_, err = tr.Transact(ctx, failed, func(ctx context.Context, tx *gorm.DB) error {
		_ = createOrder("no")(ctx, tx)
		return errors.New("declined")
	})
	require.Error(t, err)
	require.Empty(t, e.barrier(t, failed.ID), "the barrier row rolled back with the business rows")

	rejected := &txmsg.Message{Topic: e.topic, Body: make([]byte, txmsg.DefaultMaxBodySize+1)}
	_, err = tr.Transact(ctx, rejected, createOrder("big"))
	require.ErrorIs(t, err, txmsg.ErrBodyTooLarge)
	require.Empty(t, rejected.ID, "no ID is assigned to a rejected message")

	counts, err := e.chk.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{checker.StateCommitted: 1, checker.StateRolledBack: 0}, counts)
	require.EqualValues(t, 1, e.orders(t))
}

func TestTransactionalConfigValidation(t *testing.T) {
	t.Parallel()
	db := &gorm.DB{}
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	good := TransactionalConfig{Conn: Conn{NameServers: []string{"127.0.0.1:9876"}}, Group: "g"}
	cases := []struct {
		name string
		edit func(*TransactionalConfig)
	}{
		{"no name servers", func(c *TransactionalConfig) { c.NameServers = nil }},
		{"bad name server", func(c *TransactionalConfig) { c.NameServers = []string{"localhost"} }},
		{"bad port", func(c *TransactionalConfig) { c.NameServers = []string{"localhost:99999"} }},
		{"no group", func(c *TransactionalConfig) { c.Group = "" }},
		{"bad group", func(c *TransactionalConfig) { c.Group = "a group" }},
		{"access key alone", func(c *TransactionalConfig) { c.AccessKey = "ak" }},
		{"token alone", func(c *TransactionalConfig) { c.SecurityToken = "tok" }},
		{"negative timeout", func(c *TransactionalConfig) { c.SendTimeout = -time.Second }},
		{"bad topic", func(c *TransactionalConfig) { c.Topics = []string{"a b"} }},
		{"bad namespace", func(c *TransactionalConfig) { c.Namespace = "ns!" }},
		{"no hook", func(c *TransactionalConfig) { c.Hooks = txmsg.Hooks{struct{ n int }{}} }},
		{"nil hook", func(c *TransactionalConfig) { c.Hooks = txmsg.Hooks{nil} }},
		{"cache age past the check window", func(c *TransactionalConfig) { c.CheckBackCacheAge = time.Hour }},
	}
	for _, tc := range cases {
		cfg := good
		tc.edit(&cfg)
		_, err := NewTransactional(db, chk, cfg)
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, tc.name)
	}
	_, err = NewTransactional(nil, chk, good)
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	_, err = NewTransactional(db, nil, good)
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)

	withSecret := good
	withSecret.AccessKey, withSecret.SecretKey = "AKIDEXAMPLE123", "very-secret-value"
	require.NotContains(t, withSecret.String(), "very-secret-value")
	require.NotContains(t, withSecret.String(), "AKIDEXAMPLE123")
}

// A check-back that comes while the local transaction is still running in
// this process does not block the check-back goroutine or guess: it answers
// UNKNOWN, and the transaction's own END_TRANSACTION decides. The slow
// transaction commits and its event is delivered.
//
// The broker re-queues a half message each time it checks it, so a message
// whose check raced its commit can reach consumers twice; the inbox drops
// the second copy (see the consumer tests).
func TestTransactionalSlowLocalTxStillCommits(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	logger, logs := newLogRecorder()
	tr := e.start(t, e.db, e.chk, logger)
	msg := &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}
	_, err := tr.Transact(context.Background(), msg, func(ctx context.Context, tx *gorm.DB) error {
		if err := createOrder("slow")(ctx, tx); err != nil {
			return err
		}
		// Outlast the test broker's transactionTimeOut plus a check
		// interval, so a check-back arrives mid-transaction.
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && logs.countLines("still running here", msg.ID) == 0 {
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, logs.countLines("still running here", msg.ID), 1, "no check-back raced the transaction")
	require.Eventually(t, func() bool { return obs.Count(msg.ID) > 0 }, 60*time.Second, 50*time.Millisecond)
	require.EqualValues(t, 1, e.orders(t))
	require.Equal(t, checker.StateCommitted, e.barrier(t, msg.ID))
}

// When the check-back decides before the local transaction records its
// barrier, the local transaction must not commit: the caller gets
// ErrRolledBackByCheck, and there is no row and no delivery.
func TestTransactionalCheckBackBeforeBarrierRollsBack(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	logger, logs := newLogRecorder()
	msg := &txmsg.Message{ID: txmsg.NewID(), Topic: e.topic, Body: []byte(`{}`)}
	// Stall before the barrier insert until a check-back has been answered
	// for this message.
	stall := pointHook{afterHalfSend: func(*txmsg.Message) {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && logs.countLines("check-back answered", msg.ID) == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}}
	tr := e.start(t, e.db, e.chk, logger, stall)
	receipt, err := tr.Transact(context.Background(), msg, createOrder("late"))
	require.ErrorIs(t, err, txmsg.ErrRolledBackByCheck)
	require.Equal(t, txmsg.StateRolledBack, receipt.State)
	require.Zero(t, e.orders(t))
	require.Equal(t, checker.StateRolledBack, e.barrier(t, msg.ID))
	obs.NeverDelivered(t, msg.ID, 4*time.Second)
}

// childEnv names the environment a re-executed test binary reads.
const childEnv = "TXMSG_TX_CHILD"

// TestTransactionalChildProcess is not a test of its own: the crash tests
// re-execute the test binary to run it as a producer that is SIGKILLed at
// an exact point of a send.
func TestTransactionalChildProcess(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("runs only as a child of the crash tests")
	}
	var point, dsn, topic, group, id string
	parts := strings.SplitN(spec, "|", 5)
	require.Len(t, parts, 5)
	point, dsn, topic, group, id = parts[0], parts[1], parts[2], parts[3], parts[4]
	db, err := testbed.Open(dsn)
	require.NoError(t, err)
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	kill := func() {
		fmt.Println("KILL-POINT", point)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	hook := pointHook{
		afterHalfSend: func(*txmsg.Message) {
			if point == "after-half-send" {
				kill()
			}
		},
		afterLocal: func(_ *txmsg.Message, state txmsg.LocalState) {
			if point == "after-local-commit" && state == txmsg.StateCommitted {
				kill()
			}
		},
	}
	tr, err := NewTransactional(db, chk, TransactionalConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: group, Hooks: txmsg.Hooks{hook},
		Topics: []string{topic},
	})
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	_, err = tr.Transact(context.Background(), &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{"from":"child"}`)}, createOrder("child"))
	t.Fatalf("the child should have been killed at %s, Transact returned %v", point, err)
}

// runChild runs a producer of e's group in a child process and waits for
// it to be killed at point.
func runChild(t *testing.T, e *txEnv, point, id string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTransactionalChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{point, e.dsn, e.topic, e.group, id}, "|"))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "child output:\n%s", strings.Join(lines, "\n"))
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child was not killed at %s:\n%s", point, strings.Join(lines, "\n"))
	require.Contains(t, strings.Join(lines, "\n"), "KILL-POINT "+point)
}

// The producer dies after the half message is stored and before its local
// transaction runs. Another producer of the group answers the check-back
// with ROLLBACK, and the message is never delivered.
func TestTransactionalCrashAfterHalfSendRollsBack(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	e.start(t, e.db, e.chk, nil) // the surviving instance of the group
	id := txmsg.NewID()
	runChild(t, e, "after-half-send", id)

	require.Eventually(t, func() bool { return e.barrier(t, id) != "" }, 60*time.Second, 100*time.Millisecond,
		"no check-back reached the surviving producer")
	require.Equal(t, checker.StateRolledBack, e.barrier(t, id))
	require.Zero(t, e.orders(t))
	obs.NeverDelivered(t, id, 4*time.Second)
}

// The producer dies after its local commit and before END_TRANSACTION. The
// check-back answers COMMIT from the barrier; the event arrives once.
func TestTransactionalCrashAfterCommitDelivers(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	e.start(t, e.db, e.chk, nil)
	id := txmsg.NewID()
	runChild(t, e, "after-local-commit", id)

	require.EqualValues(t, 1, e.orders(t))
	require.Equal(t, checker.StateCommitted, e.barrier(t, id))
	obs.DeliveredOnce(t, id)
}

// While the database is unreachable, check-backs answer UNKNOWN and nothing
// is delivered; once it is back, the committed transaction is delivered.
func TestTransactionalDatabaseDownDuringCheckBacks(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)

	proxy, cutChk := e.cuttableChecker(t)
	logger, logs := newLogRecorder()
	e.start(t, e.db, cutChk, logger)

	proxy.Cut()
	id := txmsg.NewID()
	runChild(t, e, "after-local-commit", id)
	require.Equal(t, checker.StateCommitted, e.barrier(t, id))

	require.Eventually(t, func() bool { return logs.countLines("check-back unresolved", id) >= 2 }, 30*time.Second, 50*time.Millisecond,
		"expected UNKNOWN answers while the database is cut; logs:\n%s", logs)
	require.Zero(t, obs.Count(id), "nothing may be delivered on an UNKNOWN answer")
	proxy.Restore()
	obs.DeliveredOnce(t, id)
}

// With no broker to reach, the half send fails, local never runs and
// nothing is written.
func TestTransactionalDeadBrokerRunsNothing(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(context.Background()))
	tr, err := NewTransactional(db, chk, TransactionalConfig{
		Conn: Conn{NameServers: []string{"127.0.0.1:1"}}, Group: testbed.Name(t, "dead"), SendTimeout: time.Second, Retries: 1,
		Topics: []string{"txmsg_nowhere"},
	})
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })

	ran := false
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = tr.Transact(ctx, &txmsg.Message{Topic: "txmsg_nowhere", Body: []byte(`{}`)}, func(context.Context, *gorm.DB) error {
		ran = true
		return nil
	})
	require.Error(t, err)
	require.False(t, ran)
	counts, err := chk.Counts(context.Background())
	require.NoError(t, err)
	require.Zero(t, counts[checker.StateCommitted]+counts[checker.StateRolledBack])

	require.NoError(t, tr.Close(context.Background()))
	_, err = tr.Transact(context.Background(), &txmsg.Message{Topic: "txmsg_nowhere", Body: []byte(`{}`)}, func(context.Context, *gorm.DB) error { return nil })
	require.ErrorIs(t, err, txmsg.ErrClosed)
}

// With the database unreachable the local transaction cannot begin: the
// caller gets the error, the half message is rolled back, and nothing is
// delivered.
func TestTransactionalDatabaseDownRunsNothing(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	proxy, cutDB := testbed.ProxiedDB(t, e.dsn)
	tr := e.start(t, cutDB, e.chk, nil)

	proxy.Cut()
	msg := &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}
	ran := false
	receipt, err := tr.Transact(context.Background(), msg, func(ctx context.Context, tx *gorm.DB) error {
		ran = true
		return createOrder("x")(ctx, tx)
	})
	require.Error(t, err)
	require.False(t, ran)
	require.NotNil(t, receipt)
	require.Equal(t, txmsg.StateRolledBack, receipt.State)
	obs.NeverDelivered(t, msg.ID, 4*time.Second)
	require.Zero(t, e.orders(t))

	// Once the database is back the same producer works again.
	proxy.Restore()
	var next *txmsg.Message
	require.Eventually(t, func() bool {
		next = &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}
		_, err := tr.Transact(context.Background(), next, createOrder("y"))
		return err == nil
	}, 20*time.Second, 200*time.Millisecond)
	obs.Delivered(t, next.ID)
}

// The barrier row written by the local transaction must be the one the
// checker reads: a checker on another database would answer ROLLBACK for
// every committed transaction that needs a check-back.
func TestTransactionalRefusesACheckerOnAnotherDatabase(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	other := testbed.DB(t)
	chk, err := checker.New(other, checker.Config{})
	require.NoError(t, err)
	_, err = NewTransactional(e.db, chk, e.config(nil))
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorIs(t, err, checker.ErrOtherDatabase)
	require.ErrorContains(t, err, "different databases")

	// The same database through another pool is fine.
	again, err := testbed.Open(e.dsn)
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := again.DB(); err == nil {
			_ = s.Close()
		}
	})
	same, err := checker.New(again, checker.Config{})
	require.NoError(t, err)
	tr, err := NewTransactional(e.db, same, e.config(nil))
	require.NoError(t, err)
	require.NoError(t, tr.Close(context.Background()))
}

// Transact does not join a transaction the caller holds (the package
// documentation says so and shows what to do instead). Inside an open
// transaction it runs on a second connection: the event and its local work
// commit even though the outer transaction rolls back. With a pool of one
// connection it waits for the caller's connection until ctx ends, and
// nothing is sent or written.
func TestTransactInsideAnOpenTransactionIsNotJoined(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)
	tr := e.start(t, e.db, e.chk, nil)
	ctx := context.Background()

	msg := &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}
	outerFailed := errors.New("outer transaction fails after Transact")
	err := e.db.Transaction(func(outer *gorm.DB) error {
		if err := createOrder("outer")(ctx, outer); err != nil {
			return err
		}
		if _, err := tr.Transact(ctx, msg, createOrder("inner")); err != nil {
			return err
		}
		return outerFailed
	})
	require.ErrorIs(t, err, outerFailed)
	obs.Delivered(t, msg.ID)
	var skus []string
	require.NoError(t, e.db.Model(&order{}).Pluck("sku", &skus).Error)
	require.Equal(t, []string{"inner"}, skus, "the inner work committed on its own connection")

	// One connection: Transact waits for the caller's until ctx ends.
	one, err := testbed.Open(e.dsn)
	require.NoError(t, err)
	sqlDB, err := one.DB()
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = sqlDB.Close() })
	single := e.start(t, one, e.chk, nil)
	stuck := &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}
	ran := false
	err = one.Transaction(func(outer *gorm.DB) error {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := single.Transact(short, stuck, func(context.Context, *gorm.DB) error {
			ran = true
			return nil
		})
		return err
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, ran)
	obs.NeverDelivered(t, stuck.ID, 4*time.Second)
	require.NotEqual(t, checker.StateCommitted, e.barrier(t, stuck.ID))
}

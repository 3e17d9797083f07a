package txrmq_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// consumerKinds are the two consumers a new group's start concerns.
var consumerKinds = []string{"concurrent", "ordered"}

// startKind starts a consumer of kind for group on topic, with handle as
// its handler, and returns its Close.
func startKind(t *testing.T, kind string, db *gorm.DB, topic, group string, handle txmsg.Handler[consumerEvent]) func(context.Context) error {
	t.Helper()
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	conn := txrmq.Conn{NameServers: []string{testbed.NameServer()}}
	route := txmsg.Handle(txmsg.Topic[consumerEvent]{Name: topic}, handle)
	switch kind {
	case "concurrent":
		c, err := txrmq.NewConsumer(inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{Conn: conn, Group: group})
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		return c.Close
	case "ordered":
		c, err := txrmq.NewOrderedConsumer(inbox, []txmsg.Route{route}, txrmq.OrderedConsumerConfig{Conn: conn, Group: group})
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		return c.Close
	}
	t.Fatalf("unknown consumer kind %q", kind)
	return nil
}

// A brand-new group's start offsets are on the broker when Start returns,
// not only in the client's memory until its first persist (10 s later):
// the broker answers "no offset" for none of the topic's queues.
func TestNewGroupStartOffsetsOnBrokerWhenStartReturns(t *testing.T) {
	testbed.RunsOnExpiringBroker(t)
	for _, kind := range consumerKinds {
		t.Run(kind, func(t *testing.T) {
			b := newConsumerBed(t)
			ctx := context.Background()
			before, err := b.pub.BrokerOffsets(ctx, b.group, b.topic, testbed.Broker())
			require.NoError(t, err)
			require.NotEmpty(t, before)
			// A broker before 5.0 answers 0 for a group without an offset
			// while a queue's first message is in memory (and for an empty
			// queue): only a 5.x broker says -1 here.
			t.Logf("queues before the group's first start: %+v", before)
			closeC := startKind(t, kind, b.db, b.topic, b.group, noopConsumerHandler)
			t.Cleanup(func() { _ = closeC(context.Background()) })

			after, err := b.pub.BrokerOffsets(ctx, b.group, b.topic, testbed.Broker())
			require.NoError(t, err)
			require.Len(t, after, len(before))
			for _, q := range after {
				require.GreaterOrEqual(t, q.Committed, q.Min, "start offset of %+v on the broker", q)
				require.LessOrEqual(t, q.Committed, q.Max, "start offset of %+v on the broker", q)
			}
		})
	}
}

// startChildEnv names the environment a re-executed test binary reads to
// run as a consumer process that the crash test kills.
const startChildEnv = "TXMSG_START_CHILD"

// TestNewGroupCrashChildProcess is not a test of its own: the crash test
// re-executes the test binary to run it as the first consumer of a new
// group, which it kills as soon as Start has returned.
func TestNewGroupCrashChildProcess(t *testing.T) {
	spec := os.Getenv(startChildEnv)
	if spec == "" {
		t.Skip("runs only as a child of TestNewGroupCrashRightAfterStartLosesNothing")
	}
	parts := strings.Split(spec, "|")
	require.Len(t, parts, 4)
	kind, dsn, topic, group := parts[0], parts[1], parts[2], parts[3]
	testbed.RunsOnExpiringBroker(t)
	testbed.RequireBroker(t)
	testbed.QuietClientLogs()
	db, err := testbed.Open(dsn)
	require.NoError(t, err)
	startKind(t, kind, db, topic, group, noopConsumerHandler)
	fmt.Println("START-CHILD-READY")
	select {} // until killed
}

// runStartChild runs TestNewGroupCrashChildProcess and SIGKILLs it as soon
// as its consumer's Start has returned.
func runStartChild(t *testing.T, spec string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNewGroupCrashChildProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), startChildEnv+"="+spec)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	var mu sync.Mutex
	var lines []string
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if !signalled && strings.Contains(sc.Text(), "START-CHILD-READY") {
				signalled = true
				close(ready)
			}
		}
		_ = cmd.Wait()
	}()
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
	select {
	case <-ready:
	case <-done:
		t.Fatalf("consumer child exited before it was ready:\n%s", output())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("consumer child not ready after 60 s:\n%s", output())
	}
	// A crash: nothing the client would do on Close or on its timers.
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-done
	if strings.Contains(output(), "DATA RACE") {
		t.Errorf("consumer child reported a data race:\n%s", output())
	}
}

// The chaos finding: the first consumer of a brand-new group is killed
// right after Start, before the client persisted anything; events are
// published while it is down; the group's next consumer must handle every
// one of them.
//
// Before start offsets were recorded at Start, the group had no offset on
// the broker after the crash, and the next consumer asked again: where the
// broker answers "not found" (a queue whose first offset is above 0, or
// whose first message has left the page cache) the client starts at the
// queue's end, after the events published meanwhile, and skips them. On a
// broker that still holds each queue's first message in memory it answers
// "0" instead and the events are handled either way. On a broker that
// deletes its commit-log files within seconds (fileReservedTime=0, small
// files, deleteWhen every hour; testbed.ExpiringBrokerEnv=1, make
// test-broker-faults) the test first pushes each queue's first offset
// above 0, the state of a topic older than the broker's retention, where
// the broker answers a group without an offset "not found" instead of "0".
func TestNewGroupCrashRightAfterStartLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: a consumer process killed and a new one started")
	}
	expiring := testbed.RunsOnExpiringBroker(t)
	for _, kind := range consumerKinds {
		t.Run(kind, func(t *testing.T) {
			testbed.RequireBroker(t)
			testbed.QuietClientLogs()
			ctx := context.Background()
			db, dsn := testbed.DBWithDSN(t)
			inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
			require.NoError(t, err)
			require.NoError(t, inbox.Migrate(ctx))
			topic := testbed.Topic(t)
			group := testbed.Name(t, "ncg")
			pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "npg")})
			require.NoError(t, err)
			require.NoError(t, pub.Start(ctx))
			t.Cleanup(func() { _ = pub.Close(context.Background()) })
			b := &consumerBed{t: t, db: db, inbox: inbox, topic: topic, group: group, pub: pub}

			if expiring {
				expireQueueHeads(t, b)
			}
			offsets, err := pub.BrokerOffsets(ctx, group, topic, testbed.Broker())
			require.NoError(t, err)
			t.Logf("queues before the group's first start: %+v", offsets)

			runStartChild(t, strings.Join([]string{kind, dsn, topic, group}, "|"))
			offsets, err = pub.BrokerOffsets(ctx, group, topic, testbed.Broker())
			require.NoError(t, err)
			t.Logf("queues after the crash: %+v", offsets)

			var events []*txmsg.Message
			for n := range 8 {
				events = append(events, b.message(consumerEvent{N: n}))
			}
			b.publish(events...)

			closeC := startKind(t, kind, db, topic, group, noopConsumerHandler)
			t.Cleanup(func() { _ = closeC(context.Background()) })
			handled := func() int {
				n := 0
				for _, m := range events {
					n += int(b.inboxRows(m.ID))
				}
				return n
			}
			assert.Eventually(t, func() bool { return handled() == len(events) }, consumerWait, consumerTick)
			require.Equal(t, len(events), handled(), "events published while the new group's only consumer was down, handled")
		})
	}
}

// expireQueueHeads publishes filler events to the bed's topic until the
// broker has deleted the commit-log file holding each queue's first
// message, so every queue's first offset is above 0.
func expireQueueHeads(t *testing.T, b *consumerBed) {
	t.Helper()
	ctx := context.Background()
	filler := strings.Repeat("x", 16<<10)
	require.Eventually(t, func() bool {
		offsets, err := b.pub.BrokerOffsets(ctx, b.group, b.topic, testbed.Broker())
		require.NoError(t, err)
		expired := true
		for _, q := range offsets {
			if q.Min == 0 {
				expired = false
			}
		}
		if expired {
			return true
		}
		var msgs []*txmsg.Message
		for range 16 {
			msgs = append(msgs, b.message(consumerEvent{Key: filler}))
		}
		b.publish(msgs...)
		return false
	}, 3*time.Minute, 500*time.Millisecond, "the broker deletes the topic's first commit-log file (is it configured to expire files at once?)")
}

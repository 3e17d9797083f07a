package txrmq_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// orderedEffect is an ordered handler's business write. Rows of one key
// are inserted one after another, each after the previous one committed,
// so their ids are the key's handling order. No unique key: an effect
// applied twice shows up as two rows.
type orderedEffect struct {
	ID    int64  `gorm:"primaryKey;autoIncrement"`
	Key   string `gorm:"column:shard_key;size:64;not null;index"`
	Seq   int    `gorm:"not null"`
	MsgID string `gorm:"size:64;not null"`
	Pid   int    `gorm:"not null"`
}

func (orderedEffect) TableName() string { return "ordered_effects" }

// orderedHandler writes one effect row per event; fail, when set, decides
// after the write whether the attempt fails (and rolls the write back).
func orderedHandler(fail func(d txmsg.Delivery[consumerEvent]) error) txmsg.Handler[consumerEvent] {
	pid := os.Getpid()
	return func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
		if err := tx.Create(&orderedEffect{Key: d.Event.Key, Seq: d.Event.N, MsgID: d.Message.ID, Pid: pid}).Error; err != nil {
			return err
		}
		if fail != nil {
			return fail(d)
		}
		return nil
	}
}

// handledOrder returns each key's effect sequence numbers in handling
// order.
func handledOrder(t *testing.T, db *gorm.DB) map[string][]int {
	t.Helper()
	var rows []orderedEffect
	require.NoError(t, db.Order("id").Find(&rows).Error)
	out := map[string][]int{}
	for _, r := range rows {
		out[r.Key] = append(out[r.Key], r.Seq)
	}
	return out
}

func seqs(from, to int) []int {
	out := make([]int, 0, to-from+1)
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func (b *consumerBed) orderedConfig() txrmq.OrderedConsumerConfig {
	return txrmq.OrderedConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: b.group,
		MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond,
	}
}

func (b *consumerBed) startOrdered(cfg txrmq.OrderedConsumerConfig, inbox *txmsg.Inbox, route txmsg.Route) *txrmq.OrderedConsumer {
	b.t.Helper()
	c, err := txrmq.NewOrderedConsumer(inbox, []txmsg.Route{route}, cfg)
	require.NoError(b.t, err)
	require.NoError(b.t, c.Start(context.Background()))
	b.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// keyed builds the messages of events from..to of key, in order.
func (b *consumerBed) keyed(key string, from, to int) []*txmsg.Message {
	var out []*txmsg.Message
	for n := from; n <= to; n++ {
		m := b.message(consumerEvent{N: n, Key: key})
		m.ShardingKey = key
		out = append(out, m)
	}
	return out
}

// queueOf is the queue of 4 that the publisher's selector picks for key.
func queueOf(key string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32() % 4
}

func TestOrderedConsumerConfigValidation(t *testing.T) {
	inbox, err := txmsg.NewInbox(&gorm.DB{}, txmsg.InboxConfig{})
	require.NoError(t, err)
	route := txmsg.Handle(txmsg.Topic[consumerEvent]{Name: "t"}, orderedHandler(nil))
	conn := txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}
	for name, cfg := range map[string]txrmq.OrderedConsumerConfig{
		"negative concurrency":    {Conn: conn, Group: "g", Concurrency: -1},
		"too much concurrency":    {Conn: conn, Group: "g", Concurrency: 1001},
		"negative reconsume":      {Conn: conn, Group: "g", MaxReconsumeTimes: -1},
		"negative backoff":        {Conn: conn, Group: "g", MinBackoff: -time.Second},
		"max below min backoff":   {Conn: conn, Group: "g", MinBackoff: time.Second, MaxBackoff: time.Millisecond},
		"no name servers":         {Group: "g"},
		"group with a bad symbol": {Conn: conn, Group: "a b"},
	} {
		_, err := txrmq.NewOrderedConsumer(inbox, []txmsg.Route{route}, cfg)
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, name)
	}
	_, err = txrmq.NewOrderedConsumer(nil, []txmsg.Route{route}, txrmq.OrderedConsumerConfig{Conn: conn, Group: "g"})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "nil inbox")
	_, err = txrmq.NewOrderedConsumer(inbox, []txmsg.Route{}, txrmq.OrderedConsumerConfig{Conn: conn, Group: "g"})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "no routes")
	_, err = txrmq.NewOrderedConsumer(inbox, []txmsg.Route{route, route}, txrmq.OrderedConsumerConfig{Conn: conn, Group: "g"})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "two routes for one topic")
}

// A failed handler is retried in place: no later message of its key (or
// queue) is handled before it commits, and its failed attempts leave no
// effect.
func TestOrderedConsumerRetriesInPlace(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	require.NoError(t, b.db.AutoMigrate(&orderedEffect{}))
	var failures atomic.Int32
	b.startOrdered(b.orderedConfig(), b.inbox, txmsg.Handle(b.topicOf(), orderedHandler(func(d txmsg.Delivery[consumerEvent]) error {
		// Every fifth event fails its first two attempts.
		if d.Event.N%5 == 2 && d.Attempt <= 2 {
			failures.Add(1)
			return fmt.Errorf("event %d attempt %d fails", d.Event.N, d.Attempt)
		}
		return nil
	})))

	const keys, perKey = 6, 25
	for k := range keys {
		b.publish(b.keyed(fmt.Sprintf("key-%d", k), 1, perKey)...)
	}
	require.Eventually(t, func() bool {
		return b.count(b.db.Model(&orderedEffect{})) >= keys*perKey
	}, 2*consumerWait, consumerTick)

	order := handledOrder(t, b.db)
	require.Len(t, order, keys)
	for k, got := range order {
		require.Equal(t, seqs(1, perKey), got, "handling order of %s", k)
	}
	require.EqualValues(t, keys*5*2, failures.Load(), "every planned failure happened")
	require.EqualValues(t, keys*perKey, b.count(b.db.Model(&orderedEffect{})), "no effect applied twice")
}

// parkHook records the OnConsumed calls with OutcomeParked.
type parkHook struct {
	mu     sync.Mutex
	parked []string
}

func (h *parkHook) OnConsumed(_ context.Context, _ string, r *txmsg.Received, outcome txmsg.Outcome, err error, _ time.Duration) {
	if err == nil && outcome == txmsg.OutcomeParked {
		h.mu.Lock()
		h.parked = append(h.parked, r.Message.ID)
		h.mu.Unlock()
	}
}

// A message whose handler keeps failing is parked after MaxReconsumeTimes
// retries, reported to the hooks, and its queue goes on in order.
func TestOrderedConsumerParksAfterMaxReconsumeTimes(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	require.NoError(t, b.db.AutoMigrate(&orderedEffect{}))
	hook := &parkHook{}
	inbox, err := txmsg.NewInbox(b.db, txmsg.InboxConfig{Hooks: txmsg.Hooks{hook, b}})
	require.NoError(t, err)
	cfg := b.orderedConfig()
	cfg.MaxReconsumeTimes = 2
	cfg.Heartbeat = fleet.Config{Interval: 200 * time.Millisecond}
	require.NoError(t, fleet.Migrate(context.Background(), b.db, fleet.DefaultTable))
	logs := &lockedBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	var failingSeen atomic.Int32 // the failures recorded when attempt 3 began
	b.startOrdered(cfg, inbox, txmsg.Handle(b.topicOf(), orderedHandler(func(d txmsg.Delivery[consumerEvent]) error {
		if d.Event.N == 3 {
			if d.Attempt == 3 {
				rows, err := inbox.Failing(context.Background(), txmsg.FailingFilter{Group: b.group, IDs: []string{d.Message.ID}})
				if err == nil && len(rows) == 1 {
					failingSeen.Store(int32(rows[0].Failures))
				}
			}
			return fmt.Errorf("event 3 always fails (attempt %d)", d.Attempt)
		}
		return nil
	})))

	msgs := b.keyed("k", 1, 6)
	b.publish(msgs...)
	poison := msgs[2]
	require.Eventually(t, func() bool {
		return b.count(b.db.Model(&orderedEffect{})) >= 5
	}, consumerWait, consumerTick)

	require.Equal(t, map[string][]int{"k": {1, 2, 4, 5, 6}}, handledOrder(t, b.db))
	var attempts []int
	for _, s := range b.of(poison.ID) {
		attempts = append(attempts, s.attempt)
	}
	require.Equal(t, []int{1, 2, 3, 3}, attempts, "three failed attempts, then parked")
	last := b.of(poison.ID)[3]
	require.NoError(t, last.err)
	require.Equal(t, txmsg.OutcomeParked, last.outcome)

	_, deadTable := b.inbox.Tables()
	var rows []txmsg.ParkedRow
	require.NoError(t, b.db.Table(deadTable).Where("msg_id = ?", poison.ID).Find(&rows).Error)
	require.Len(t, rows, 1)
	require.Equal(t, poison.Body, rows[0].Body)
	require.Equal(t, b.group, rows[0].ConsumerGroup)
	require.Equal(t, 3, rows[0].Attempt)
	require.Contains(t, rows[0].Error, "event 3 always fails (attempt 3)")
	hook.mu.Lock()
	require.Equal(t, []string{poison.ID}, hook.parked)
	hook.mu.Unlock()
	require.EqualValues(t, 0, b.inboxRows(poison.ID), "a parked message is not recorded as handled")
	require.EqualValues(t, 2, failingSeen.Load(), "its failures were recorded while it was retried in place")
	failing, err := inbox.Failing(context.Background(), txmsg.FailingFilter{Group: b.group})
	require.NoError(t, err)
	require.Empty(t, failing, "parking it removed its failing row")
	require.Contains(t, logs.String(), "level=ERROR msg=\"handler failed on its last attempt; message parked in the inbox's parked table and its queue goes on\"")
	require.Contains(t, logs.String(), "txmsg_id="+poison.ID)

	// Its heartbeat counts the same: five handled, three failed attempts,
	// one parked.
	require.Eventually(t, func() bool {
		rows, err := fleet.List(context.Background(), b.db, fleet.DefaultTable)
		require.NoError(t, err)
		return len(rows) == 1 && rows[0].Kind == fleet.KindOrderedConsumer && rows[0].Name == b.group &&
			rows[0].State == fleet.StateLive && rows[0].Handled == 5 && rows[0].Failed == 3 && rows[0].Parked == 1
	}, consumerWait, consumerTick, "the ordered consumer's row never showed its counts")
}

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// While one queue waits on a failing message, the other queues are
// handled.
func TestOrderedConsumerOtherQueuesFlow(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	require.NoError(t, b.db.AutoMigrate(&orderedEffect{}))
	stuck, free := "stuck", ""
	for i := 0; free == ""; i++ {
		if k := fmt.Sprintf("free-%d", i); queueOf(k) != queueOf(stuck) {
			free = k
		}
	}
	release := make(chan struct{})
	cfg := b.orderedConfig()
	cfg.MaxReconsumeTimes = 1000
	b.startOrdered(cfg, b.inbox, txmsg.Handle(b.topicOf(), orderedHandler(func(d txmsg.Delivery[consumerEvent]) error {
		if d.Event.Key == stuck && d.Event.N == 1 {
			select {
			case <-release:
			default:
				return errors.New("not yet")
			}
		}
		return nil
	})))

	b.publish(b.keyed(stuck, 1, 10)...)
	b.publish(b.keyed(free, 1, 10)...)
	require.Eventually(t, func() bool {
		return len(handledOrder(t, b.db)[free]) == 10
	}, consumerWait, consumerTick, "the free key's queue flows")
	require.Empty(t, handledOrder(t, b.db)[stuck], "nothing of the stuck key overtook its first event")
	close(release)
	require.Eventually(t, func() bool {
		return len(handledOrder(t, b.db)[stuck]) == 10
	}, consumerWait, consumerTick)
	order := handledOrder(t, b.db)
	require.Equal(t, seqs(1, 10), order[stuck])
	require.Equal(t, seqs(1, 10), order[free])
}

// orderedChildEnv names the environment a re-executed test binary reads
// to run as an ordered consumer process.
const orderedChildEnv = "TXMSG_ORDERED_CHILD"

// TestOrderedConsumerChildProcess is not a test of its own: the crash test
// re-executes the test binary to run it as one consumer process of the
// group, which it kills.
func TestOrderedConsumerChildProcess(t *testing.T) {
	spec := os.Getenv(orderedChildEnv)
	if spec == "" {
		t.Skip("runs only as a child of TestOrderedConsumerCrashAndRebalance")
	}
	parts := strings.Split(spec, "|")
	require.Len(t, parts, 3)
	dsn, topic, group := parts[0], parts[1], parts[2]
	testbed.RequireBroker(t)
	db, err := testbed.Open(dsn)
	require.NoError(t, err)
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	var calls, failed atomic.Int64
	c, err := txrmq.NewOrderedConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[consumerEvent]{Name: topic}, orderedHandler(func(d txmsg.Delivery[consumerEvent]) error {
		calls.Add(1)
		if rand.IntN(20) == 0 { // about 1 in 20 calls fails, after its write
			failed.Add(1)
			return fmt.Errorf("random failure of %s #%d", d.Event.Key, d.Event.N)
		}
		return nil
	}))}, txrmq.OrderedConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: group,
		MaxReconsumeTimes: 1000, // nothing is parked: the test wants every event handled
		MinBackoff:        10 * time.Millisecond,
		MaxBackoff:        50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	fmt.Println("ORDERED-CHILD-READY")
	for {
		time.Sleep(time.Second)
		fmt.Printf("ORDERED-CHILD calls=%d failed=%d\n", calls.Load(), failed.Load())
	}
}

// noLocal is a local transaction with no business write.
func noLocal(context.Context, *gorm.DB) error { return nil }

// orderedChild is one running consumer process.
type orderedChild struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	done chan struct{}
}

func startOrderedChild(t *testing.T, spec string) *orderedChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOrderedConsumerChildProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), orderedChildEnv+"="+spec)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	c := &orderedChild{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			c.mu.Lock()
			c.out = append(c.out, sc.Text())
			c.mu.Unlock()
			if !signalled && strings.Contains(sc.Text(), "ORDERED-CHILD-READY") {
				signalled = true
				close(ready)
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		c.kill()
		<-c.done
		if strings.Contains(c.output(), "DATA RACE") {
			t.Errorf("consumer child %d reported a data race:\n%s", cmd.Process.Pid, c.output())
		}
		if t.Failed() {
			out := c.output()
			if len(out) > 4000 {
				out = out[len(out)-4000:]
			}
			t.Logf("consumer child %d output (tail):\n%s", cmd.Process.Pid, out)
		}
	})
	select {
	case <-ready:
	case <-c.done:
		t.Fatalf("consumer child exited before it was ready:\n%s", c.output())
	case <-time.After(60 * time.Second):
		c.kill()
		t.Fatalf("consumer child not ready after 60 s:\n%s", c.output())
	}
	return c
}

// failures is the number of failed handler calls the child last
// reported.
func (c *orderedChild) failures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, line := range c.out {
		var calls, failed int
		if _, err := fmt.Sscanf(line, "ORDERED-CHILD calls=%d failed=%d", &calls, &failed); err == nil {
			n = failed
		}
	}
	return n
}

func (c *orderedChild) kill() { _ = c.cmd.Process.Signal(syscall.SIGKILL) }

func (c *orderedChild) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.out, "\n")
}

// The acceptance test: 20 keys × 100 events through the ordered
// outbox, handled by two consumer processes whose handlers fail about one
// call in 20; one process is killed mid-run and started again. Every key
// is handled exactly 1..100, in order, each effect once.
func TestOrderedConsumerCrashAndRebalance(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "a crash and rebalance test of consumer processes, which no collation or isolation level changes")
	if testing.Short() {
		t.Skip("slow: two consumer processes, one killed and restarted")
	}
	testbed.RequireBroker(t)
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t)
	topic := testbed.Name(t, "txmsg")
	require.NoError(t, testbed.CreateTopic(ctx, topic, 8))
	group := testbed.Name(t, "ocg")
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	require.NoError(t, db.AutoMigrate(&orderedEffect{}))
	ob, err := outbox.New(db, outbox.Config{})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))

	spec := strings.Join([]string{dsn, topic, group}, "|")
	a := startOrderedChild(t, spec)
	b := startOrderedChild(t, spec)

	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "opub")})
	require.NoError(t, err)
	require.NoError(t, pub.Start(ctx))
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{
		Name: "ordered-relay", Ordered: true, PollInterval: 50 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxAttempts: -1,
	})
	require.NoError(t, err)
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	const keys, perKey = 20, 100
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("key-%02d", k)
			for n := 1; n <= perKey; n++ {
				body, err := txmsg.JSONCodec[consumerEvent]{}.Encode(consumerEvent{N: n, Key: key})
				if err != nil {
					errs <- err
					return
				}
				// One transaction per event, each after the previous one
				// committed: the key's commit order is 1..100.
				if _, err := ob.Transact(ctx, &txmsg.Message{Topic: topic, Body: body, ShardingKey: key}, noLocal); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	effects := func() int64 {
		var n int64
		require.NoError(t, db.Model(&orderedEffect{}).Count(&n).Error)
		return n
	}

	// Kill one consumer mid-run, let the other take its queues, then start
	// a new one, which takes some back.
	require.Eventually(t, func() bool { return effects() >= keys*perKey/4 }, 3*time.Minute, 100*time.Millisecond)
	a.kill()
	<-a.done
	atKill := effects()
	t.Logf("killed one consumer after %d effects", atKill)
	require.Eventually(t, func() bool { return effects() >= atKill+keys*perKey/10 }, 3*time.Minute, 100*time.Millisecond,
		"the surviving consumer takes over the dead one's queues")
	a2 := startOrderedChild(t, spec)
	t.Logf("restarted it after %d effects", effects())

	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return effects() >= keys*perKey }, 5*time.Minute, 200*time.Millisecond)
	// Anything still in flight would show up as an extra effect.
	time.Sleep(2 * time.Second)

	order := handledOrder(t, db)
	require.Len(t, order, keys)
	keysSorted := make([]string, 0, len(order))
	for k := range order {
		keysSorted = append(keysSorted, k)
	}
	sort.Strings(keysSorted)
	for _, k := range keysSorted {
		require.Equal(t, seqs(1, perKey), order[k], "handling order of %s", k)
	}
	require.EqualValues(t, keys*perKey, effects(), "no effect applied twice")
	var pids []int
	require.NoError(t, db.Model(&orderedEffect{}).Distinct("pid").Pluck("pid", &pids).Error)
	t.Logf("effects written by %d processes", len(pids))
	require.Contains(t, pids, b.cmd.Process.Pid, "the surviving consumer handled events")
	require.Contains(t, pids, a2.cmd.Process.Pid, "the restarted consumer took queues over and handled events")
	failed := a.failures() + b.failures() + a2.failures()
	t.Logf("%d handler calls failed and were retried in place (the killed process reported until %d)", failed, a.failures())
	require.Positive(t, b.failures()+a2.failures(), "handlers failed along the way")
}

// Closing a consumer whose queue is retrying a message leaves that message
// unacknowledged: the group's next consumer handles it, and the rest of its
// key, in order.
func TestOrderedConsumerCloseHandsOver(t *testing.T) {
	t.Parallel()
	b := newConsumerBed(t)
	require.NoError(t, b.db.AutoMigrate(&orderedEffect{}))
	cfg := b.orderedConfig()
	cfg.MaxReconsumeTimes = 1000
	var failed atomic.Int32
	first, err := txrmq.NewOrderedConsumer(b.inbox, []txmsg.Route{txmsg.Handle(b.topicOf(), orderedHandler(func(d txmsg.Delivery[consumerEvent]) error {
		if d.Event.N == 3 {
			failed.Add(1)
			return errors.New("event 3 fails on the first consumer")
		}
		return nil
	}))}, cfg)
	require.NoError(t, err)
	require.ErrorContains(t, first.Health(context.Background()), "not started")
	require.NoError(t, first.Start(context.Background()))
	require.NoError(t, first.Health(context.Background()))
	b.publish(b.keyed("k", 1, 6)...)
	require.Eventually(t, func() bool { return failed.Load() >= 2 }, consumerWait, consumerTick)
	require.NoError(t, first.Close(context.Background()))
	require.ErrorIs(t, first.Health(context.Background()), txmsg.ErrClosed)
	require.Equal(t, map[string][]int{"k": {1, 2}}, handledOrder(t, b.db))

	b.startOrdered(cfg, b.inbox, txmsg.Handle(b.topicOf(), orderedHandler(nil)))
	require.Eventually(t, func() bool { return len(handledOrder(t, b.db)["k"]) >= 6 }, consumerWait, consumerTick)
	require.Equal(t, map[string][]int{"k": seqs(1, 6)}, handledOrder(t, b.db))
}

package txrmq

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/rmqwire"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func TestDetectChangesSeesMovedRestartedAndTruncatedMasters(t *testing.T) {
	t.Parallel()
	base := ClusterSnapshot{
		"a": {Master: "10.0.0.1:10911", Boot: 100, MaxOffset: 5000},
		"b": {Master: "10.0.0.2:10911", Boot: 200, MaxOffset: 7000},
	}
	require.Empty(t, DetectChanges(nil, base), "the first reading is the baseline")
	require.Empty(t, DetectChanges(base, base))

	// The commit log grows: no change.
	grown := ClusterSnapshot{"a": {Master: "10.0.0.1:10911", Boot: 100, MaxOffset: 9000}, "b": base["b"]}
	require.Empty(t, DetectChanges(base, grown))

	// The slave of a is promoted at another address.
	moved := ClusterSnapshot{"a": {Master: "10.0.0.3:10911", Boot: 300, MaxOffset: 4000}, "b": base["b"]}
	got := DetectChanges(base, moved)
	require.Len(t, got, 1)
	require.Equal(t, "a", got[0].Broker)
	require.Equal(t, "master moved", got[0].Why)

	// b's master restarted at the same address.
	restarted := ClusterSnapshot{"a": base["a"], "b": {Master: "10.0.0.2:10911", Boot: 250, MaxOffset: 7000}}
	got = DetectChanges(base, restarted)
	require.Len(t, got, 1)
	require.Equal(t, "master restarted", got[0].Why)

	// A commit log that ends earlier under the same boot time.
	shrank := ClusterSnapshot{"a": {Master: "10.0.0.1:10911", Boot: 100, MaxOffset: 4000}, "b": base["b"]}
	got = DetectChanges(base, shrank)
	require.Len(t, got, 1)
	require.Equal(t, "commit log shrank", got[0].Why)
}

func TestDetectChangesComparesAReturningMasterWithTheOneThatLeft(t *testing.T) {
	t.Parallel()
	known := Merge(nil, ClusterSnapshot{"a": {Master: "10.0.0.1:10911", Boot: 100, MaxOffset: 5000}})

	// Broker ID 0 disappears from the route: nothing to judge yet, and
	// the last known master is kept.
	gone := ClusterSnapshot{"a": {}}
	require.Empty(t, DetectChanges(known, gone))
	known = Merge(known, gone)
	require.Equal(t, "10.0.0.1:10911", known["a"].Master)

	// A master that does not answer its runtime information is not judged.
	silent := ClusterSnapshot{"a": {Master: "10.0.0.1:10911"}}
	require.Empty(t, DetectChanges(known, silent))
	known = Merge(known, silent)
	require.Equal(t, int64(100), known["a"].Boot)

	// It comes back restarted (an asynchronous flush may have lost the
	// tail of its commit log): a change.
	back := ClusterSnapshot{"a": {Master: "10.0.0.1:10911", Boot: 400, MaxOffset: 4800}}
	got := DetectChanges(known, back)
	require.Len(t, got, 1)
	require.Equal(t, "master restarted", got[0].Why)
	known = Merge(known, back)
	require.Empty(t, DetectChanges(known, back), "a change is reported once")

	// The same process back in the route (the name server missed its
	// heartbeats) is no change.
	known = Merge(known, gone)
	require.Empty(t, DetectChanges(known, back))

	// Reappearing elsewhere is a change.
	got = DetectChanges(known, ClusterSnapshot{"a": {Master: "10.0.0.9:10911", Boot: 500, MaxOffset: 100}})
	require.Len(t, got, 1)
	require.Equal(t, "master moved", got[0].Why)
}

func TestReconcilerConfigNamesTheField(t *testing.T) {
	t.Parallel()
	conn := Conn{NameServers: []string{"127.0.0.1:9876"}}
	good := ReconcilerConfig{Conn: conn}.WithDefaults()
	require.NoError(t, good.Validate())
	require.Equal(t, DefaultReconcileWindow, good.Window)
	require.Equal(t, "reconciler", good.Name)
	require.Equal(t, DefaultKeepMessagesFor, good.KeepMessagesFor)
	require.NoError(t, ReconcilerConfig{Conn: conn, KeepMessagesFor: -1}.WithDefaults().Validate(), "negative: never cleared")
	for field, cfg := range map[string]ReconcilerConfig{
		"NameServers":     {},
		"Window":          {Conn: conn, Window: -time.Second},
		"Interval":        {Conn: conn, Interval: -time.Second},
		"Concurrency":     {Conn: conn, Concurrency: -1},
		"Batch":           {Conn: conn, Batch: -1},
		"QueryTimeout":    {Conn: conn, QueryTimeout: -time.Second},
		"KeepMessagesFor": {Conn: conn, KeepMessagesFor: time.Minute},
		"hook":            {Conn: conn, Hooks: txmsg.Hooks{42}},
	} {
		err := cfg.WithDefaults().Validate()
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, field)
		require.Contains(t, err.Error(), field)
	}
	_, err := NewReconciler(nil, nil, good)
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
}

// reconcileHook records the reconciler's passes.
type reconcileHook struct {
	mu     sync.Mutex
	passes [][3]int
}

func (h *reconcileHook) OnReconciled(_ context.Context, _ string, checked, missing, republished int, _ error, _ time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.passes = append(h.passes, [3]int{checked, missing, republished})
}

func (h *reconcileHook) last() [3]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.passes[len(h.passes)-1]
}

func event(topic, what string) *txmsg.Message {
	return &txmsg.Message{ID: txmsg.NewID(), Topic: topic, Tag: "t", Keys: []string{"order-" + what},
		Body: []byte(fmt.Sprintf(`{"what":%q}`, what)), Properties: map[string]string{"what": what}}
}

// A barrier row committed for an event whose message never reached the
// broker (the tail a failover lost) is published again; one whose message
// is on the broker is not; one older than the window is not checked.
func TestReconcilerRepublishesTheBarrierRowsTheBrokerLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testbed.DB(t)
	chk, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	pub := newTestPublisher(t, 0)

	present, lost, old := event(topic, "present"), event(topic, "lost"), event(topic, "old")
	for _, m := range []*txmsg.Message{present, lost, old} {
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, m) }))
	}
	require.NoError(t, db.Table(chk.Table()).Where("tx_id = ?", []byte(old.ID)).
		Update("created_at", time.Now().UTC().Add(-time.Hour)).Error)
	// An event committed without a kept message is counted, not checked.
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.Begin(ctx, tx, txmsg.NewID()) }))
	require.NoError(t, pub.Publish(ctx, present.Clone()))
	obs.Delivered(t, present.ID)

	hook := &reconcileHook{}
	rec, err := NewReconciler(chk, pub, ReconcilerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}, Hooks: txmsg.Hooks{hook}})
	require.NoError(t, err)
	now, err := chk.Now(ctx)
	require.NoError(t, err)
	// The broker indexes keys shortly after it stores a message.
	var res ReconcileResult
	require.Eventually(t, func() bool {
		res, err = rec.Reconcile(ctx, now.Add(-2*time.Minute), now.Add(time.Second))
		require.NoError(t, err)
		return len(res.Missing) == 1
	}, 20*time.Second, 500*time.Millisecond)
	require.Equal(t, []string{lost.ID}, res.Missing)
	require.Equal(t, 2, res.Checked, "the old row is outside the window")
	require.Equal(t, 1, res.Unkept)
	require.Equal(t, 1, res.Republished)
	require.Equal(t, [3]int{2, 1, 1}, hook.last())

	obs.DeliveredOnce(t, lost.ID)
	got := obs.First(lost.ID)
	require.Equal(t, lost.Body, got.Body)
	require.Equal(t, "lost", got.GetProperty("what"))
	require.Equal(t, "t", got.GetTags())
	require.Contains(t, got.GetKeys(), lost.ID)
	require.Contains(t, got.GetKeys(), "order-lost")

	// Once the republished message is indexed, a second pass finds
	// nothing missing: it published nothing twice.
	require.Eventually(t, func() bool {
		res, err = rec.Reconcile(ctx, now.Add(-2*time.Minute), now.Add(time.Second))
		require.NoError(t, err)
		return len(res.Missing) == 0
	}, 20*time.Second, 500*time.Millisecond)
	obs.NeverDelivered(t, old.ID, 2*time.Second)
	require.Equal(t, 1, obs.Count(present.ID), "the present event was not published again")
	require.Equal(t, 1, obs.Count(lost.ID))
}

// In local-table mode the events are the rows marked sent.
func TestReconcilerRepublishesTheSentOutboxRowsTheBrokerLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testbed.DB(t)
	ob, err := outbox.New(db, outbox.Config{})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	pub := newTestPublisher(t, 0)

	present, lost, pending := event(topic, "present"), event(topic, "lost"), event(topic, "pending")
	for _, m := range []*txmsg.Message{present, lost, pending} {
		_, err := ob.Transact(ctx, m, func(context.Context, *gorm.DB) error { return nil })
		require.NoError(t, err)
	}
	// Marked sent as a relay does; only present reached the broker.
	require.NoError(t, db.Table(ob.Table()).Where("msg_id IN ?", [][]byte{[]byte(present.ID), []byte(lost.ID)}).
		Updates(map[string]any{"status": outbox.StatusSent, "sent_at": gorm.Expr("UTC_TIMESTAMP(6)"), "updated_at": gorm.Expr("UTC_TIMESTAMP(6)")}).Error)
	require.NoError(t, pub.Publish(ctx, present.Clone()))
	obs.Delivered(t, present.ID)

	rec, err := NewReconciler(ob, pub, ReconcilerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}})
	require.NoError(t, err)
	now, err := ob.Now(ctx)
	require.NoError(t, err)
	var res ReconcileResult
	require.Eventually(t, func() bool {
		res, err = rec.Reconcile(ctx, now.Add(-2*time.Minute), now.Add(time.Second))
		require.NoError(t, err)
		return len(res.Missing) == 1
	}, 20*time.Second, 500*time.Millisecond)
	require.Equal(t, []string{lost.ID}, res.Missing)
	require.Equal(t, 2, res.Checked, "pending rows are the relay's")
	obs.DeliveredOnce(t, lost.ID)
	require.Equal(t, lost.Body, obs.First(lost.ID).Body)

	// A window that ends before the rows were sent checks none of them.
	res, err = rec.Reconcile(ctx, now.Add(-time.Hour), now.Add(-time.Minute))
	require.NoError(t, err)
	require.Zero(t, res.Checked)
	require.Equal(t, 1, obs.Count(present.ID))
	obs.NeverDelivered(t, pending.ID, time.Second)
}

// A topic the name servers do not route is an error, not "missing".
func TestReconcilerRefusesToGuessWithoutARoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testbed.DB(t)
	chk, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	pub := newTestPublisher(t, 0)
	m := event("no-such-topic-"+txmsg.NewID()[:8], "x")
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, m) }))
	rec, err := NewReconciler(chk, pub, ReconcilerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}})
	require.NoError(t, err)
	now, _ := chk.Now(ctx)
	res, err := rec.Reconcile(ctx, now.Add(-time.Minute), now.Add(time.Second))
	require.Error(t, err)
	require.True(t, errors.Is(err, rmqwire.ErrTopicNotExist), "%v", err)
	require.Empty(t, res.Missing)
	require.Zero(t, res.Republished)
}

// The snapshot of the test bed's cluster names its broker with a boot
// time; the watch loop starts and stops, and meanwhile clears the
// messages barrier rows keep past KeepMessagesFor.
func TestReconcilerReadsTheClusterAndStops(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	db := testbed.DB(t)
	chk, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	old, young := event("t", "old"), event("t", "young")
	for _, m := range []*txmsg.Message{old, young} {
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, m) }))
	}
	require.NoError(t, db.Table(chk.Table()).Where("tx_id = ?", []byte(old.ID)).
		Update("created_at", time.Now().UTC().Add(-time.Hour)).Error)
	pub := newTestPublisher(t, 0)
	rec, err := NewReconciler(chk, pub, ReconcilerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}},
		Interval: 100 * time.Millisecond, KeepMessagesFor: 30 * time.Minute})
	require.NoError(t, err)
	snap, err := rec.Snapshot(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, snap)
	for name, s := range snap {
		require.NotEmpty(t, s.Master, name)
		require.NotZero(t, s.Boot, name)
		require.NotZero(t, s.MaxOffset, name)
	}
	require.NoError(t, rec.Start(ctx))
	require.NoError(t, rec.Start(ctx))
	now, _ := chk.Now(ctx)
	require.Eventually(t, func() bool {
		msgs, _, unkept, err := chk.Committed(ctx, now.Add(-2*time.Hour), now.Add(time.Second), "", 10)
		require.NoError(t, err)
		return unkept == 1 && len(msgs) == 1 && msgs[0].ID == young.ID
	}, 10*time.Second, 50*time.Millisecond, "the old row's message is cleared, the young one's kept")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, rec.Close(cctx))
	require.NoError(t, rec.Close(cctx))
}

// BenchmarkReconcilerCheck measures one pass over events the broker has,
// per event checked, at Concurrency 1 and the default.
func BenchmarkReconcilerCheck(b *testing.B) {
	ctx := context.Background()
	db := testbed.DB(b)
	chk, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(b, err)
	require.NoError(b, chk.Migrate(ctx))
	topic := testbed.Topic(b)
	testbed.RequireBroker(b)
	pub, err := NewPublisher(PublisherConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(b, "pub")})
	require.NoError(b, err)
	require.NoError(b, pub.Start(ctx))
	b.Cleanup(func() { _ = pub.Close(context.Background()) })
	const events = 500
	var msgs []*txmsg.Message
	for i := range events {
		m := event(topic, fmt.Sprint(i))
		require.NoError(b, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, m) }))
		msgs = append(msgs, m.Clone())
	}
	require.NoError(b, pub.Publish(ctx, msgs...))
	now, _ := chk.Now(ctx)
	for _, conc := range []int{1, DefaultReconcileConcurrency} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			rec, err := NewReconciler(chk, pub, ReconcilerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}, Logger: slog.New(slog.DiscardHandler)}, Concurrency: conc})
			require.NoError(b, err)
			require.Eventually(b, func() bool {
				res, err := rec.Reconcile(ctx, now.Add(-time.Minute), now.Add(time.Minute))
				return err == nil && len(res.Missing) == 0
			}, 30*time.Second, 200*time.Millisecond)
			b.ResetTimer()
			for range b.N {
				res, err := rec.Reconcile(ctx, now.Add(-time.Minute), now.Add(time.Minute))
				require.NoError(b, err)
				require.Equal(b, events, res.Checked)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*events), "µs/event")
		})
	}
}

// rewritingNameServer answers as the test bed's name server does, with
// the broker's address replaced by whatever addr holds: a broker group
// whose master moves, while the broker behind it stays the real one.
type rewritingNameServer struct {
	ln   net.Listener
	real string
	from string
	addr atomic.Value // string: the master's address to announce
	// frozen: answer each request with the last answer to the same
	// request code and topic, as a name server that no longer learns
	// anything would.
	frozen atomic.Bool
	last   sync.Map // "code topic" → *rmqwire.Answer
}

func newRewritingNameServer(t *testing.T) *rewritingNameServer {
	t.Helper()
	return newRewritingNameServerFor(t, testbed.Broker())
}

// newRewritingNameServerFor is a rewritingNameServer that replaces the
// broker address from (announced as is until addr is set).
func newRewritingNameServerFor(t *testing.T, from string) *rewritingNameServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ns := &rewritingNameServer{ln: ln, real: testbed.NameServer(), from: from}
	ns.addr.Store(from)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go ns.serve(c)
		}
	}()
	return ns
}

func (ns *rewritingNameServer) serve(c net.Conn) {
	defer c.Close()
	for {
		var lens [8]byte
		if _, err := io.ReadFull(c, lens[:]); err != nil {
			return
		}
		total := binary.BigEndian.Uint32(lens[0:4])
		hlen := binary.BigEndian.Uint32(lens[4:8]) & 0xFFFFFF
		rest := make([]byte, total-4)
		if _, err := io.ReadFull(c, rest); err != nil {
			return
		}
		var req struct {
			Code      int               `json:"code"`
			Opaque    int32             `json:"opaque"`
			ExtFields map[string]string `json:"extFields"`
		}
		if err := json.Unmarshal(rest[:hlen], &req); err != nil {
			return
		}
		key := fmt.Sprintf("%d %s", req.Code, req.ExtFields["topic"])
		var a *rmqwire.Answer
		if v, ok := ns.last.Load(key); ok && ns.frozen.Load() {
			a = v.(*rmqwire.Answer)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			var err error
			a, err = rmqwire.Invoke(ctx, ns.real, false, req.Code, req.ExtFields)
			cancel()
			if err != nil {
				return
			}
			ns.last.Store(key, a)
		}
		body := bytes.ReplaceAll(a.Body, []byte(ns.from), []byte(ns.addr.Load().(string)))
		h, _ := json.Marshal(map[string]any{"code": a.Code, "language": "JAVA", "version": 0, "opaque": req.Opaque, "flag": 1, "remark": a.Remark, "extFields": a.Ext})
		frame := make([]byte, 8, 8+len(h)+len(body))
		binary.BigEndian.PutUint32(frame[0:4], uint32(4+len(h)+len(body)))
		binary.BigEndian.PutUint32(frame[4:8], uint32(len(h)))
		frame = append(append(frame, h...), body...)
		if _, err := c.Write(frame); err != nil {
			return
		}
	}
}

// The watcher notices a broker group's master moving (here: announced at
// another address, a proxy to the same broker) and reconciles the window
// before it by itself: the committed event the broker never received is
// published again, once; the one it has is not.
func TestReconcilerWatchesTheMasterMoveAndReconciles(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	db := testbed.DB(t)
	chk, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	pub := newTestPublisher(t, 0)

	present, lost := event(topic, "present"), event(topic, "lost")
	for _, m := range []*txmsg.Message{present, lost} {
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, m) }))
	}
	require.NoError(t, pub.Publish(ctx, present.Clone()))
	obs.Delivered(t, present.ID)

	ns := newRewritingNameServer(t)
	hook := &reconcileHook{}
	rec, err := NewReconciler(chk, pub, ReconcilerConfig{Conn: Conn{NameServers: []string{ns.ln.Addr().String()}},
		Interval: 200 * time.Millisecond, Hooks: txmsg.Hooks{hook}})
	require.NoError(t, err)
	require.NoError(t, rec.Start(ctx))
	t.Cleanup(func() { _ = rec.Close(context.Background()) })

	// The baseline: no pass while nothing changes.
	time.Sleep(time.Second)
	hook.mu.Lock()
	require.Empty(t, hook.passes, "no change, no pass")
	hook.mu.Unlock()

	// broker-a's master is now announced elsewhere: a failover.
	ns.addr.Store(testbed.NewProxy(t, testbed.Broker()).Addr())
	obs.DeliveredOnce(t, lost.ID)
	require.Eventually(t, func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return len(hook.passes) > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, [3]int{2, 1, 1}, hook.last())
	time.Sleep(time.Second)
	require.Equal(t, 1, obs.Count(present.ID))
	require.Equal(t, 1, obs.Count(lost.ID))
	hook.mu.Lock()
	require.Len(t, hook.passes, 1, "one change, one pass")
	hook.mu.Unlock()
}

// A delayed event the broker lost before its due time goes back to the
// delay topic, not to its topic: the forwarder sends it on when it is due,
// never earlier.
func TestReconcilerSendsALostDelayedEventToTheDelayTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testbed.DB(t)
	chk, err := checker.New(db, checker.Config{KeepMessages: true})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	topic, delayTopic := testbed.Topic(t), testbed.Topic(t)
	arr := &arrivals{at: map[string]time.Time{}}
	obs := testbed.Observe(t, topic, func(m *primitive.MessageExt) error { arr.record(m); return nil })
	f := newForwarder(t, delayTopic, DelayAuto)
	require.NoError(t, f.Start(ctx))
	pub := newTestPublisher(t, 0)

	lost := event(topic, "lost-delayed")
	lost.Delay = 6 * time.Second
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error { return chk.BeginMessage(ctx, tx, lost) }))
	kept := time.Now()

	rec, err := NewReconciler(chk, pub, ReconcilerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}, DelayTopic: delayTopic})
	require.NoError(t, err)
	now, err := chk.Now(ctx)
	require.NoError(t, err)
	res, err := rec.Reconcile(ctx, now.Add(-2*time.Minute), now.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{lost.ID}, res.Missing)
	require.Equal(t, 1, res.Republished)

	due := kept.Add(lost.Delay)
	obs.NeverDelivered(t, lost.ID, time.Until(due)-300*time.Millisecond)
	obs.DeliveredWithin(t, lost.ID, 15*time.Second)
	require.False(t, arr.get(lost.ID).Before(due.Add(-20*time.Millisecond)), "arrived %v before its due time", due.Sub(arr.get(lost.ID)))
	require.Equal(t, lost.Body, obs.First(lost.ID).Body)

	// While it waits in the delay topic, and after, the event is present.
	require.Eventually(t, func() bool {
		res, err = rec.Reconcile(ctx, now.Add(-2*time.Minute), now.Add(time.Second))
		require.NoError(t, err)
		return len(res.Missing) == 0
	}, 20*time.Second, 500*time.Millisecond)
	require.Equal(t, 1, obs.Count(lost.ID))
}

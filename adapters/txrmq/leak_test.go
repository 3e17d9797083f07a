package txrmq

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// clientLeftovers are goroutines rocketmq-client-go itself leaves running
// after Shutdown (see docs/reliability.md, "What Close leaves behind"):
//
//   - each push consumer's statistics timers, which sleep until the next
//     minute, hour or first day of the month before they notice the
//     shutdown;
//   - each push consumer's expired-message cleaner, which sleeps for the
//     consume timeout (15 min) before it notices;
//   - the reader of each client instance's name server connection, which
//     the client never closes; the name server drops it when idle (120 s).
var clientLeftovers = []string{
	"rocketmq-client-go/v2/consumer.(*statsItemSet).init.func",
	"rocketmq-client-go/v2/consumer.(*pushConsumer).Start.func1.2(",
}

const nameServerReader = "rocketmq-client-go/v2/internal/remote.(*remotingClient).receiveResponse("

// newGoroutines returns the stacks of goroutines that are not in base,
// leaving out the database pool's (a pooled connection has a goroutine of
// its own while it stays in the pool) and the client's own leftovers. At
// most readers connection readers are left out: one name server connection
// per client instance.
func newGoroutines(base map[string]string, readers int) []string {
	var out []string
	for id, g := range goroutineStacks() {
		if _, ok := base[id]; ok {
			continue
		}
		if strings.Contains(g, "go-sql-driver/mysql.(*mysqlConn).startWatcher") ||
			strings.Contains(g, "database/sql.(*DB).connectionOpener") {
			continue
		}
		if slices.ContainsFunc(clientLeftovers, func(f string) bool { return strings.Contains(g, f) }) {
			continue
		}
		if strings.Contains(g, nameServerReader) && readers > 0 {
			readers--
			continue
		}
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// After Close, nothing any component started is left running: no
// goroutine of txmsg's, and none of the client's but the leftovers listed
// in clientLeftovers (its check-back reader, which it never stops, is
// stopped by txmsg). The client's timers that sleep up to 10 s before
// their first tick end after that, so the test waits for them.
//
// Not parallel: it compares the goroutines of the whole process.
func TestCloseLeavesNothingRunning(t *testing.T) {
	testbed.SkipOnServerDefaults(t, "it counts goroutines after Close, which no collation or isolation level changes")
	e := newTxEnv(t)
	ctx := context.Background()
	inbox, err := txmsg.NewInbox(e.db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	ob, err := outbox.New(e.db, outbox.Config{})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))
	base := goroutineStacks()

	var handled atomic.Int64
	route := txmsg.Handle(txmsg.Topic[struct{}]{Name: e.topic}, func(context.Context, *gorm.DB, txmsg.Delivery[struct{}]) error {
		handled.Add(1)
		return nil
	})
	cons, err := NewConsumer(inbox, []txmsg.Route{route}, ConsumerConfig{Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "cg")})
	require.NoError(t, err)
	require.NoError(t, cons.Start(ctx))

	tr := e.start(t, e.db, e.chk, nil)
	_, err = tr.Transact(ctx, &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}, createOrder("leak"))
	require.NoError(t, err)

	pub, err := NewPublisher(PublisherConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: e.group,
		Topics:  []string{e.topic},
		Checker: e.chk,
	})
	require.NoError(t, err)
	require.NoError(t, pub.Start(ctx))
	require.NoError(t, pub.Publish(ctx, &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}))

	sw, err := NewSweeper(e.chk, pub, SweeperConfig{
		Conn: Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.Name(t, "sweep"),
		ProducerGroups: []string{e.group},
	})
	require.NoError(t, err)
	require.NoError(t, sw.Start(ctx))

	relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	_, err = ob.Transact(ctx, &txmsg.Message{Topic: e.topic, Body: []byte(`{}`)}, createOrder("outbox"))
	require.NoError(t, err)

	require.Eventually(t, func() bool { return handled.Load() >= 3 }, 60*time.Second, 50*time.Millisecond)

	stopRelay()
	require.NoError(t, <-relayDone)
	require.NoError(t, sw.Close(ctx))
	require.NoError(t, pub.Close(ctx))
	require.NoError(t, tr.Close(ctx))
	require.NoError(t, cons.Close(ctx))

	// Client instances: the consumer, the transactional producer, the
	// publisher and the sweeper's consumer.
	const clients = 4
	left := newGoroutines(base, clients)
	for deadline := time.Now().Add(60 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = newGoroutines(base, clients) {
		time.Sleep(200 * time.Millisecond)
	}
	require.Empty(t, left, "goroutines left running after Close:\n%s", strings.Join(left, "\n\n"))
}

package txrmq_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// blackhole returns the address of a listener that accepts TCP
// connections and never writes to them, as a name server whose host is
// up and whose process hangs.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// deadAddr returns an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

type component interface {
	Start(context.Context) error
	Close(context.Context) error
}

// components builds one of each txmsg RocketMQ component on the name
// server ns, all of topic, logging to log.
func components(t *testing.T, db *gorm.DB, ns, topic string, log *slog.Logger) map[string]component {
	t.Helper()
	ctx := context.Background()
	conn := txrmq.Conn{NameServers: []string{ns}, Logger: log}
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	route := txmsg.Handle(txmsg.Topic[map[string]any]{Name: topic}, func(context.Context, *gorm.DB, txmsg.Delivery[map[string]any]) error { return nil })

	out := map[string]component{}
	tr, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{Conn: conn, Group: testbed.Name(t, "tx"), Topics: []string{topic}})
	require.NoError(t, err)
	out["transactional"] = tr
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: conn, Group: testbed.Name(t, "pub"), Topics: []string{topic}})
	require.NoError(t, err)
	out["publisher"] = pub
	cons, err := txrmq.NewConsumer(inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{Conn: conn, Group: testbed.Name(t, "cg")})
	require.NoError(t, err)
	out["consumer"] = cons
	oc, err := txrmq.NewOrderedConsumer(inbox, []txmsg.Route{route}, txrmq.OrderedConsumerConfig{Conn: conn, Group: testbed.Name(t, "og")})
	require.NoError(t, err)
	out["ordered consumer"] = oc
	sw, err := txrmq.NewSweeper(chk, pub, txrmq.SweeperConfig{Conn: conn, Group: testbed.Name(t, "sw"), ProducerGroups: []string{"txp"}})
	require.NoError(t, err)
	out["sweeper"] = sw
	for _, c := range out {
		t.Cleanup(func() { _ = c.Close(context.Background()) })
	}
	return out
}

// TestStartNameServerUnreachable: with the only name server dead
// (connection refused) or a black hole (connects, never answers), the
// consumers' and the sweeper's Start fail within the name-server timeout
// with an error that wraps txmsg.ErrUnavailable and names the address and
// what went wrong, not a missing topic. The producers start (they send
// once the name server is back) and log the same error.
func TestStartNameServerUnreachable(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	db := testbed.DB(t)
	for name, tc := range map[string]struct {
		addr func(*testing.T) string
		says string
	}{
		"dead":      {deadAddr, "connection refused"},
		"blackhole": {blackhole, "no answer"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr := tc.addr(t)
			logs := &lockedBuffer{}
			log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			for kind, c := range components(t, db, addr, "txmsg_ns_"+name, log) {
				// Far longer than the name-server timeout: Start ends on
				// its own bound, not the caller's.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				began := time.Now()
				err := c.Start(ctx)
				cancel()
				t.Logf("%s: Start returned after %s: %v", kind, time.Since(began).Round(time.Millisecond), err)
				switch kind {
				case "transactional", "publisher":
					require.NoError(t, err, kind)
				default:
					require.Error(t, err, kind)
					require.ErrorIs(t, err, txmsg.ErrUnavailable, kind)
					require.NotErrorIs(t, err, context.DeadlineExceeded, kind)
					require.Contains(t, err.Error(), addr, kind)
					require.Contains(t, err.Error(), tc.says, kind)
					require.NotContains(t, err.Error(), "route info not found", kind)
				}
			}
			require.Contains(t, logs.String(), addr, "the producers' warning names the name server")
			require.Contains(t, logs.String(), tc.says)
			require.NotContains(t, logs.String(), "no route yet")
		})
	}
}

// TestStartBoundedByContext: a caller's context shorter than the
// name-server timeout ends every component's Start against a name server
// that never answers; the error says so and names the address.
func TestStartBoundedByContext(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	db := testbed.DB(t)
	addr := blackhole(t)
	for kind, c := range components(t, db, addr, "txmsg_ns_ctx", slog.New(slog.DiscardHandler)) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Start(ctx)
		cancel()
		require.Error(t, err, kind)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%s: %v", kind, err)
		require.Contains(t, err.Error(), addr, kind)
	}
}

// TestMissingTopicNamesTheCommand: a topic the name server has no route
// for is reported the same way by every component, naming the txmsgctl
// command that creates it: the consumers' Start fails with it, the
// producers' Start logs it as a warning and their Health returns it.
func TestMissingTopicNamesTheCommand(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	db := testbed.DB(t)
	ns := testbed.NameServer()
	topic := testbed.Name(t, "missing")
	create := "txmsgctl topic create -namesrv " + ns + " -topic " + topic
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cs := components(t, db, ns, topic, log)
	for _, kind := range []string{"consumer", "ordered consumer"} {
		err := cs[kind].Start(context.Background())
		require.Error(t, err, kind)
		require.Contains(t, err.Error(), create, kind)
		require.ErrorIs(t, err, txmsg.ErrTopicNotFound, kind)
		require.NotErrorIs(t, err, txmsg.ErrUnavailable, kind)
	}
	for _, kind := range []string{"transactional", "publisher"} {
		require.NoError(t, cs[kind].Start(context.Background()), kind)
	}
	require.Equal(t, 2, strings.Count(logs.String(), create), "both producers warn, naming the command:\n%s", logs)
	err := cs["transactional"].(*txrmq.Transactional).Health(context.Background())
	require.ErrorIs(t, err, txmsg.ErrTopicNotFound)
	require.Contains(t, err.Error(), create)

	// Created, the topic lets the consumers start: a Start that failed on
	// a missing topic may be called again.
	require.NoError(t, testbed.CreateTopic(context.Background(), topic, 4))
	for _, kind := range []string{"consumer", "ordered consumer"} {
		require.NoError(t, cs[kind].Start(context.Background()), kind)
	}
}

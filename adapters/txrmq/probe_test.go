package txrmq

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"
)

// fakeRoutes answers route queries from a map; a nil entry fails, and
// block makes every query wait for ctx's end.
type fakeRoutes struct {
	routes  map[string][]*primitive.MessageQueue
	brokers map[string]string
	block   chan struct{}
}

func (f *fakeRoutes) FetchSubscribeMessageQueues(topic string) ([]*primitive.MessageQueue, error) {
	if f.block != nil {
		<-f.block
	}
	mqs, ok := f.routes[topic]
	if !ok {
		return nil, errors.New("topic not exist")
	}
	return mqs, nil
}

func (f *fakeRoutes) FindBrokerAddrByName(name string) string { return f.brokers[name] }

func TestProbeRoutes(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := closed.Addr().String()
	require.NoError(t, closed.Close())

	f := &fakeRoutes{
		routes: map[string][]*primitive.MessageQueue{
			"ok":       {{Topic: "ok", BrokerName: "a"}, {Topic: "ok", BrokerName: "a", QueueId: 1}},
			"dead":     {{Topic: "dead", BrokerName: "b"}},
			"unknown":  {{Topic: "unknown", BrokerName: "c"}},
			"noqueues": {},
		},
		brokers: map[string]string{"a": ln.Addr().String(), "b": deadAddr},
	}
	ctx := context.Background()
	require.NoError(t, probeRoutes(ctx, f, []string{"ok", "unknown"}), "a broker not learnt yet is not dialled")
	require.ErrorContains(t, probeRoutes(ctx, f, []string{"ok", "dead"}), "broker b ("+deadAddr+") of topic \"dead\"")
	require.ErrorContains(t, probeRoutes(ctx, f, []string{"missing"}), `route of topic "missing": topic not exist`)
	require.ErrorContains(t, probeRoutes(ctx, f, []string{"noqueues"}), "no readable queues")

	f.block = make(chan struct{})
	defer close(f.block)
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, probeRoutes(tctx, f, []string{"ok"}), context.DeadlineExceeded)
}

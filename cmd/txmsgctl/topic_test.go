package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestTopicCreateAndCheck creates a new topic with txmsgctl on the test
// broker's cluster and checks it: check fails on the missing topic and
// names the command that creates it, create makes it with the queue
// count asked for (as the name server routes it to a client), and check
// then passes, or fails on another queue count.
func TestTopicCreateAndCheck(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ns := testbed.NameServer()
	topic := testbed.Name(t, "ctl")
	other := testbed.Name(t, "ctl2")

	r := ctl(t, nil, "topic", "check", "-namesrv", ns, "-topic", topic)
	require.Equal(t, exitError, r.code, r)
	require.Contains(t, r.stderr, `topic "`+topic+`" does not exist on name server `+ns, r)
	require.Contains(t, r.stderr, "txmsgctl topic create -namesrv "+ns+" -topic "+topic, r)

	r = ctl(t, map[string]string{"TXMSG_NAMESRV": ns}, "topic", "create", "-topic", topic+","+other, "-queues", "3")
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "topic "+topic+": broker ")
	require.Contains(t, r.stdout, "3 read / 3 write queues")

	// As a client sees it.
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{ns})))
	require.NoError(t, err)
	for _, name := range []string{topic, other} {
		mqs, err := adm.FetchPublishMessageQueues(context.Background(), name)
		require.NoError(t, err, name)
		require.Len(t, mqs, 3, name)
	}

	r = ctl(t, nil, "topic", "check", "-namesrv", ns, "-topic", topic+","+other, "-queues", "3")
	require.Equal(t, exitOK, r.code, r)
	require.Equal(t, 2, strings.Count(r.stdout, "3 read / 3 write queues"), r)
	r = ctl(t, nil, "topic", "check", "-namesrv", ns, "-topic", topic, "-queues", "5")
	require.Equal(t, exitError, r.code, r)
	require.Contains(t, r.stderr, "has 3 read / 3 write queues on broker", r)

	// More queues on the same topic: create sets the counts.
	r = ctl(t, nil, "topic", "create", "-namesrv", ns, "-topic", topic, "-queues", "5", "-broker", testbed.Broker())
	require.Equal(t, exitOK, r.code, r)
	r = ctl(t, nil, "topic", "check", "-namesrv", ns, "-topic", topic, "-queues", "5")
	require.Equal(t, exitOK, r.code, r)
}

// TestTopicCommandErrors: bad command lines exit 2 and say what to pass;
// a name server nobody listens on exits 1 and is named.
func TestTopicCommandErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		says string
	}{
		"no subcommand":      {[]string{"topic"}, "create or check"},
		"unknown subcommand": {[]string{"topic", "drop"}, "create or check"},
		"no name server":     {[]string{"topic", "create", "-topic", "a"}, "-namesrv"},
		"no topic":           {[]string{"topic", "check", "-namesrv", "127.0.0.1:9876"}, "-topic"},
		"bad topic":          {[]string{"topic", "create", "-namesrv", "127.0.0.1:9876", "-topic", "a/b"}, `-topic "a/b"`},
		"system topic":       {[]string{"topic", "create", "-namesrv", "127.0.0.1:9876", "-topic", "%DLQ%g"}, "reserved"},
		"queues":             {[]string{"topic", "create", "-namesrv", "127.0.0.1:9876", "-topic", "a", "-queues", "0"}, "-queues"},
		"cluster and broker": {[]string{"topic", "create", "-namesrv", "127.0.0.1:9876", "-topic", "a", "-cluster", "c", "-broker", "b:1"}, "exclude"},
	} {
		r := ctl(t, nil, tc.args...)
		require.Equal(t, exitUsage, r.code, "%s: %s", name, r)
		require.Contains(t, r.stderr, tc.says, name)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	r := ctl(t, nil, "topic", "create", "-namesrv", dead, "-topic", "a")
	require.Equal(t, exitError, r.code, r)
	require.Contains(t, r.stderr, dead+": dial tcp")
	require.Contains(t, r.stderr, "connection refused")
}

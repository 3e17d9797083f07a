package txmsg_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestInboxPingReachesThePrimary: the consumers' outage probe goes to the
// primary under read/write splitting (testbed.ReadWriteSplit, as gorm's
// dbresolver or ProxySQL route). Answered by a replica while the primary
// was down, every failed attempt counted: the concurrent consumer's
// messages went to %DLQ% after their retry budget, the ordered consumer
// parked them.
func TestInboxPingReachesThePrimary(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	proxy, split := testbed.ProxiedSplit(t, dsn)
	in, err := txmsg.NewInbox(split.DB, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, in.Migrate(context.Background()))

	require.NoError(t, in.Ping(context.Background()))
	proxy.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Error(t, in.Ping(ctx), "the primary is down; the replica must not answer for it")
	proxy.Restore()
	require.Eventually(t, func() bool { return in.Ping(context.Background()) == nil }, 30*time.Second, 100*time.Millisecond)
}

package rmqwire_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/rmqwire"
	"github.com/txmsg/txmsg/internal/testbed"
)

// One connection carries requests one after the other; a request whose
// context has ended fails without waiting.
func TestConnCarriesSeveralRequests(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	c, err := rmqwire.Dial(ctx, testbed.Broker(), false)
	require.NoError(t, err)
	defer c.Close()
	for range 3 {
		_, ok, err := c.QueryByKey(ctx, testbed.Topic(t), "no-such-key", 4, time.Now().Add(-time.Hour), time.Now())
		require.NoError(t, err)
		require.False(t, ok)
	}
	info, err := rmqwire.RuntimeInfo(ctx, testbed.Broker(), false)
	require.NoError(t, err)
	boot, err := strconv.ParseInt(info["bootTimestamp"], 10, 64)
	require.NoError(t, err)
	require.Less(t, boot, time.Now().UnixMilli())
	require.NotEmpty(t, info["commitLogMaxOffset"])

	done, cancel := context.WithCancel(ctx)
	cancel()
	start := time.Now()
	_, err = c.Invoke(done, 28, nil)
	require.Error(t, err)
	require.Less(t, time.Since(start), time.Second)
}

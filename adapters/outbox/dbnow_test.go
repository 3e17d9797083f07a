package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestDBNowReadsThePrimary: under read/write splitting the relays' clock
// is the primary's, never a replica's (another host, with a clock of its
// own).
func TestDBNowReadsThePrimary(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	_, split := testbed.ProxiedSplit(t, dsn)
	before := split.ToReplica.Load()
	now, err := dbNow(context.Background(), split.DB)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().UTC(), now, time.Minute)
	require.Equal(t, before, split.ToReplica.Load(), "the clock was read on the replica")
}

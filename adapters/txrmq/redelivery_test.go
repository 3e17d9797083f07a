package txrmq

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/txmsg"
)

func TestRedeliverySpan(t *testing.T) {
	def := ConsumerConfig{}.RedeliverySpan()
	require.Equal(t, 4*time.Hour+45*time.Minute+40*time.Second, def)
	require.Less(t, def, txmsg.MinInboxPurgeAge, "the inbox's purge minimum covers the default consumer")

	require.Equal(t, 10*time.Second, ConsumerConfig{MaxReconsumeTimes: 1}.RedeliverySpan())
	require.Equal(t, def+2*time.Hour, ConsumerConfig{MaxReconsumeTimes: 17}.RedeliverySpan(), "beyond level 18 every retry waits 2 h")
	require.Equal(t, 3*5*time.Second, ConsumerConfig{MaxReconsumeTimes: 3, RetryDelayLevel: 2}.RedeliverySpan())
	require.Equal(t, 4*2*time.Hour, ConsumerConfig{MaxReconsumeTimes: 4, RetryDelayLevel: 99}.RedeliverySpan())
	require.Equal(t, def+1000*2*time.Hour, ConsumerConfig{MaxReconsumeTimes: 1016}.RedeliverySpan())
	require.Equal(t, time.Duration(math.MaxInt64), ConsumerConfig{MaxReconsumeTimes: math.MaxInt32}.RedeliverySpan(), "saturates")
	require.Equal(t, time.Duration(math.MaxInt64), ConsumerConfig{MaxReconsumeTimes: math.MaxInt32, RetryDelayLevel: 18}.RedeliverySpan())
}

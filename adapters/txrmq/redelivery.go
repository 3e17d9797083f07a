package txrmq

import (
	"math"
	"time"
)

// BrokerDelayLevels is the delay of each level of a stock broker's
// messageDelayLevel setting ("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m
// 10m 20m 30m 1h 2h"); level 1 is index 0.
var BrokerDelayLevels = [...]time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute,
	6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute,
	20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
}

// RedeliverySpan is how long after its first delivery a message whose
// handler keeps failing can still be delivered again to this consumer's
// group, on a broker with the stock delay levels ([BrokerDelayLevels]):
// the sum of the delays of its MaxReconsumeTimes redeliveries (defaults
// applied). With the defaults it is 4 h 45 min 40 s. Inbox rows must
// outlive it: purge them only after max(RedeliverySpan,
// txmsg.MinInboxPurgeAge) plus the time a handler may take.
func (c ConsumerConfig) RedeliverySpan() time.Duration {
	times := c.MaxReconsumeTimes
	if times <= 0 {
		times = DefaultMaxReconsumeTimes
	}
	top := len(BrokerDelayLevels)
	delay := func(level int) time.Duration { return BrokerDelayLevels[min(level, top)-1] }
	if c.RetryDelayLevel > 0 {
		return mulSat(delay(c.RetryDelayLevel), times)
	}
	// The broker's own schedule: redelivery k waits level 2+k (10 s
	// first), and every one past the top level waits the longest delay.
	var span time.Duration
	k := 1
	for ; k <= times && 2+k < top; k++ {
		span += delay(2 + k)
	}
	return addSat(span, mulSat(delay(top), times-k+1))
}

// mulSat is d×n, or the largest Duration when that overflows.
func mulSat(d time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	if d > time.Duration(math.MaxInt64)/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// addSat is a+b, or the largest Duration when that overflows.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

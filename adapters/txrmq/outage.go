package txrmq

import (
	"context"
	"time"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

// A consumer's attempt that fails while the inbox's database does not
// answer failed because of the database, not because of the message, so
// it counts no attempt: the consumers wait for the database and run the
// message again. Without that, a database outage longer than the retry
// budget would send good messages to %DLQ%<group> (Consumer) or park them
// in the inbox's parked table (OrderedConsumer). The Sweeper likewise holds a
// half message past HoldFor while the barrier's database does not answer.
const (
	// outageProbeTimeout bounds one probe of the database.
	outageProbeTimeout = 5 * time.Second
	// outageWaitMin and outageWaitMax bound the wait between probes.
	outageWaitMin = 500 * time.Millisecond
	outageWaitMax = 5 * time.Second
)

// databaseDown probes the inbox's database after a failed attempt and
// returns the probe's error: nil when the database answers.
func databaseDown(ctx context.Context, in *txmsg.Inbox) error {
	return probe(ctx, in.Ping)
}

// checkerDown is databaseDown for the barrier's database.
func checkerDown(ctx context.Context, chk *checker.Checker) error {
	return probe(ctx, chk.Ping)
}

// probe runs ping within outageProbeTimeout.
func probe(ctx context.Context, ping func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, outageProbeTimeout)
	defer cancel()
	return ping(ctx)
}

// outageWait is the wait after the n-th probe (n ≥ 1) of an outage that
// found the database down: 0.5 s, doubling up to 5 s.
func outageWait(n int) time.Duration {
	return min(outageWaitMin<<min(n-1, 8), outageWaitMax)
}

package main

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// The B5 relay's timeline: what its own connections to the database were
// waiting for, and when. Each client command the relay sends is recorded
// on the wire, from the write of its packet to the first read of the
// answer, with its kind (see waitKind). With the relay's Publish calls,
// the timeline splits the commit → claim stage of a slow message into
// what the relay was doing meanwhile: a round trip of the cycle it was
// in (which one), a Publish call, or none of them ("relay_cpu": its own
// code, the Go scheduler, a wake-up, or a sleep).

// timedNet is the network name the timing dialer is registered under.
const timedNet = "txbench_timed"

// relayWire is the timeline of every connection dialled on timedNet.
var relayWire = &timeline{}

var registerTimedNet = sync.OnceFunc(func() {
	registerWrappedNet(timedNet, func(c net.Conn) net.Conn { return &timedConn{Conn: c, t: relayWire} })
})

// span is one interval of the relay's timeline.
type span struct {
	kind       string
	start, end time.Time
}

// timeline keeps the spans of the connections dialled on timedNet.
type timeline struct {
	mu    sync.Mutex
	spans []span
}

func (t *timeline) add(s span) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spans = append(t.spans, s)
}

// take returns the spans recorded since the last take and forgets them.
func (t *timeline) take() []span {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.spans
	t.spans = nil
	return s
}

// timedConn records one connection's commands. database/sql uses a
// connection from one goroutine at a time, so its fields need no lock.
type timedConn struct {
	net.Conn
	t    *timeline
	kind string
	sent time.Time
}

func (c *timedConn) Write(b []byte) (int, error) {
	// A client command is a packet with sequence number 0: 3 bytes of
	// length, the sequence byte, then the command byte.
	if len(b) >= 5 && b[3] == 0 {
		c.kind, c.sent = waitKind(b[4], b[5:]), time.Now()
	}
	return c.Conn.Write(b)
}

func (c *timedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.sent.IsZero() {
		c.t.add(span{kind: c.kind, start: c.sent, end: time.Now()})
		c.sent = time.Time{}
	}
	return n, err
}

// The kinds of the relay's waits, in the order the JSON lists them.
const (
	waitBegin    = "begin"
	waitDueIDs   = "due_ids"    // the claim's plain read of the due ids (and lookAgainSoon's)
	waitClaim    = "claim_lock" // the claim's locking read by primary key
	waitBodies   = "bodies"     // the bodies of the claimed rows
	waitPublish  = "publish"    // a Publish call (not a database command)
	waitMark     = "mark"       // UPDATE of the outbox rows
	waitCommit   = "commit"     // COMMIT, or ROLLBACK
	waitOther    = "other_sql"  // leases, the next-due read, prepared statements
	waitRelayCPU = "relay_cpu"  // none of the above: the relay's code, scheduling, a wake-up or a sleep
)

var waitKinds = []string{waitBegin, waitDueIDs, waitClaim, waitBodies, waitPublish, waitMark, waitCommit, waitOther, waitRelayCPU}

// waitKind names a client command of the relay.
func waitKind(cmd byte, payload []byte) string {
	if cmd != 0x03 { // not COM_QUERY: a prepared statement, a ping, a reset
		return waitOther
	}
	q := strings.ToUpper(strings.TrimSpace(strings.ReplaceAll(string(payload[:min(len(payload), 512)]), "`", "")))
	switch {
	case strings.HasPrefix(q, "SET TRANSACTION"), strings.HasPrefix(q, "START TRANSACTION"), strings.HasPrefix(q, "BEGIN"):
		return waitBegin
	case strings.HasPrefix(q, "COMMIT"), strings.HasPrefix(q, "ROLLBACK"):
		return waitCommit
	case strings.HasPrefix(q, "SELECT") && strings.Contains(q, " FOR UPDATE"):
		return waitClaim
	case strings.HasPrefix(q, "SELECT ID, BODY "):
		return waitBodies
	case strings.HasPrefix(q, "SELECT ID FROM "):
		return waitDueIDs
	}
	if s := sqlShape(string(payload)); strings.HasPrefix(s, "UPDATE ") && !strings.HasSuffix(s, "_lease") && !strings.HasSuffix(s, "_relay") {
		return waitMark
	}
	return waitOther
}

// waitSplit is how a set of windows of the relay's timeline divides among
// the kinds of wait, in total.
type waitSplit map[string]time.Duration

// splitWaits divides each window [from, to) over spans: a moment covered
// by spans of several kinds (the purge loop's statement during a claim)
// counts for the first kind of waitKinds among them; a moment covered by
// none is relay_cpu.
func splitWaits(spans []span, windows [][2]time.Time) waitSplit {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b span) int { return a.start.Compare(b.start) })
	rank := map[string]int{}
	for i, k := range waitKinds {
		rank[k] = i
	}
	out := waitSplit{}
	for _, w := range windows {
		from, to := w[0], w[1]
		if !to.After(from) {
			continue
		}
		// The moments where the spans overlapping the window start or end
		// cut it into pieces, each covered by one set of spans.
		var over []span
		cuts := []time.Time{from, to}
		for _, sp := range s {
			if !sp.start.Before(to) {
				break
			}
			if sp.end.After(from) {
				over = append(over, sp)
				cuts = append(cuts, later(sp.start, from), earlier(sp.end, to))
			}
		}
		slices.SortFunc(cuts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(cuts); i++ {
			a, b := cuts[i-1], cuts[i]
			if !b.After(a) {
				continue
			}
			kind := waitRelayCPU
			for _, sp := range over {
				if !sp.start.After(a) && !sp.end.Before(b) && rank[sp.kind] < rank[kind] {
					kind = sp.kind
				}
			}
			out[kind] += b.Sub(a)
		}
	}
	return out
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// means is the split's mean per window, in milliseconds, for the JSON.
func (w waitSplit) means(n int) map[string]float64 {
	out := map[string]float64{}
	if n == 0 {
		return out
	}
	for _, k := range waitKinds {
		out[k] = round3(ms(w[k]) / float64(n))
	}
	return out
}

// String lists the kinds with a mean of at least 0.05 ms, largest first.
func (w waitSplit) String(n int) string {
	m := w.means(n)
	keys := slices.Clone(waitKinds)
	slices.SortStableFunc(keys, func(a, b string) int { return int(w[b] - w[a]) })
	var parts []string
	for _, k := range keys {
		if m[k] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ") + " ms"
}

// cycleDurations are the relay's transactions, from the first statement
// that begins one (SET TRANSACTION, START TRANSACTION) sent to its COMMIT
// or ROLLBACK answered: the unit a commit that arrives mid-cycle waits
// for. The relay runs one transaction at a time.
func cycleDurations(spans []span) latencies {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b span) int { return a.start.Compare(b.start) })
	var out latencies
	var begin time.Time
	for _, sp := range s {
		switch sp.kind {
		case waitBegin:
			// SET TRANSACTION ISOLATION LEVEL, then START TRANSACTION.
			if begin.IsZero() {
				begin = sp.start
			}
		case waitCommit:
			if !begin.IsZero() {
				out = append(out, sp.end.Sub(begin))
				begin = time.Time{}
			}
		}
	}
	return out
}

// kindPercentiles are p50, p99 and the largest duration of each kind of
// the relay's round trips (and Publish calls), and how many there were.
func kindPercentiles(spans []span) map[string]map[string]float64 {
	by := map[string]latencies{}
	for _, sp := range spans {
		by[sp.kind] = append(by[sp.kind], sp.end.Sub(sp.start))
	}
	out := map[string]map[string]float64{}
	for k, l := range by {
		out[k] = map[string]float64{"count": float64(len(l)), "p50": round3(l.pct(50)), "p99": round3(l.pct(99)), "max": round3(l.pct(100))}
	}
	return out
}

package txrmq

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/txmsg/txmsg/txmsg"
)

// Defaults of the check-back outcome cache ([TransactionalConfig]).
const (
	// DefaultCheckBackCacheSize is TransactionalConfig.CheckBackCacheSize's
	// default: the outcomes of the last 100,000 transactions.
	DefaultCheckBackCacheSize = 100_000
	// DefaultCheckBackCacheAge is TransactionalConfig.CheckBackCacheAge's
	// default, shortened to the checker's CheckWindow when that is shorter.
	DefaultCheckBackCacheAge = 5 * time.Minute
)

// outcomeCache remembers the definite outcomes of the local transactions
// this producer ran, so that a check-back for one of them is answered
// without the database.
//
// An entry is keyed by txmsg ID and names the half message it belongs to
// (the client's unique message key, UNIQ_KEY, which the broker sends back
// with every check-back of that half message). It answers only for that
// half message: its answer is then a fact about one local transaction
// that ran here, committed or not, and does not depend on the barrier
// table or its retention. A check-back for another half message of the
// same ID (a caller that reused the ID) goes to the barrier as before.
//
// One entry per ID, the newest outcome: recording an ID again replaces
// its entry. Entries leave after maxAge or, when size entries are held,
// oldest first; both on insert, so no goroutine is needed. Every operation
// is O(1) (eviction amortised). The slots form a ring in record order, so
// the oldest is always at its head; a slot whose ID was recorded again
// later is stale and only waits for its turn to leave.
type outcomeCache struct {
	size   int
	maxAge time.Duration
	// now is the time since the cache was made, on the monotonic clock.
	now func() time.Duration

	mu    sync.RWMutex
	byID  map[string]uint64 // txmsg ID → sequence number of its newest slot
	ring  []outcomeSlot     // grows up to size
	head  int               // index of the oldest slot
	n     int               // slots in use
	first uint64            // sequence number of the slot at head

	hits, misses, evicted atomic.Int64
}

// outcomeSlot is one recorded outcome: 48 bytes, plus the two strings it
// shares with the message it was recorded from.
type outcomeSlot struct {
	id        string
	half      string // the half message's UNIQ_KEY
	at        time.Duration
	committed bool
}

// newOutcomeCache returns a cache of at most size outcomes, each kept for
// maxAge; nil (no cache) when either is not positive.
func newOutcomeCache(size int, maxAge time.Duration) *outcomeCache {
	if size <= 0 || maxAge <= 0 {
		return nil
	}
	base := time.Now()
	return &outcomeCache{size: size, maxAge: maxAge, now: func() time.Duration { return time.Since(base) },
		byID: make(map[string]uint64)}
}

// record stores the definite outcome (committed or rolled back) of the
// local transaction of id's half message half, replacing what id had.
func (c *outcomeCache) record(id, half string, state txmsg.LocalState) {
	if c == nil {
		return
	}
	if id == "" || half == "" || (state != txmsg.StateCommitted && state != txmsg.StateRolledBack) {
		c.forget(id)
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(now)
	if c.n == c.size {
		c.evictHead()
	}
	if c.n == len(c.ring) {
		c.grow()
	}
	c.ring[(c.head+c.n)%len(c.ring)] = outcomeSlot{id: id, half: half, at: now, committed: state == txmsg.StateCommitted}
	c.byID[id] = c.first + uint64(c.n)
	c.n++
}

// forget drops what the cache holds for id: its latest outcome is not
// known.
func (c *outcomeCache) forget(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.byID, id)
	c.mu.Unlock()
}

// lookup returns the outcome recorded for id's half message half, if the
// cache holds it.
func (c *outcomeCache) lookup(id, half string) (txmsg.LocalState, bool) {
	if c == nil {
		return txmsg.StateUnknown, false
	}
	now := c.now()
	state, ok := txmsg.StateUnknown, false
	c.mu.RLock()
	if seq, found := c.byID[id]; found && half != "" {
		s := &c.ring[(c.head+int(seq-c.first))%len(c.ring)]
		if s.half == half && now-s.at < c.maxAge {
			state, ok = txmsg.StateRolledBack, true
			if s.committed {
				state = txmsg.StateCommitted
			}
		}
	}
	c.mu.RUnlock()
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return state, ok
}

// len returns how many IDs the cache holds an outcome for.
func (c *outcomeCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.byID)
}

// expire evicts the slots older than maxAge. Call with mu held.
func (c *outcomeCache) expire(now time.Duration) {
	for c.n > 0 && now-c.ring[c.head].at >= c.maxAge {
		c.evictHead()
	}
}

// evictHead evicts the oldest slot. Call with mu held and n > 0.
func (c *outcomeCache) evictHead() {
	s := &c.ring[c.head]
	if seq, ok := c.byID[s.id]; ok && seq == c.first {
		delete(c.byID, s.id)
		c.evicted.Add(1)
	}
	*s = outcomeSlot{}
	c.head = (c.head + 1) % len(c.ring)
	c.first++
	c.n--
}

// grow doubles the ring, up to size, keeping the slots in order. Call
// with mu held and the ring full.
func (c *outcomeCache) grow() {
	next := make([]outcomeSlot, min(max(2*len(c.ring), 64), c.size))
	for i := range c.n {
		next[i] = c.ring[(c.head+i)%len(c.ring)]
	}
	c.ring, c.head = next, 0
}

package main

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
)

// snapshot is the final state a run is judged on.
type snapshot struct {
	// Attempts are the producers' records, by txmsg ID.
	Attempts map[string]*attempt
	// Orders are the committed business rows, by ID.
	Orders map[string]orderRow
	// Effects are the consumer's effect rows in insertion order.
	Effects []effectRow
	// Barrier is the barrier table: tx_id → state.
	Barrier map[string]string
	// Outbox is the outbox table: msg_id → status.
	Outbox map[string]outbox.Status
	// Stored is what the broker holds, by mode.
	Stored map[string][]storedMsg
	// StoredComplete says the broker audit read every queue to its end.
	StoredComplete bool
	// TxGroup is the transactional producer group: copies stored from it
	// were committed by END_TRANSACTION or a check-back; other copies of a
	// transactional-mode event were republished by the sweeper.
	TxGroup string
	// LateBound is how long after its due time a delayed event may be
	// handled first (D2); zero leaves D2 unchecked.
	LateBound time.Duration
	// Reconciled are the txmsg IDs a reconciler published again after a
	// failover lost them (HA form). Such an event is stored and handled
	// after its key's later events that the broker kept: the documented
	// exception to I5, counted apart.
	Reconciled map[string]bool
}

// verdict holds the invariant checks' counts and a few examples of each
// violation.
type verdict struct {
	Modes map[string]*modeCounts `json:"modes"`

	Lost              int `json:"lost"`               // I1: committed, no effect
	Phantom           int `json:"phantom"`            // I2: effect without a committed transaction
	DuplicateEffects  int `json:"duplicate_effects"`  // I3: effects beyond the first per event
	Disagreements     int `json:"disagreements"`      // I4: broker vs barrier/outbox vs business rows
	OrderViolations   int `json:"order_violations"`   // I5: stored per-key order broken
	HandlerInversions int `json:"handler_inversions"` // I5 at the ordered consumer: a key's event handled after a later one
	Pending           int `json:"pending"`            // I6: outbox rows still pending
	Parked            int `json:"parked"`             // I6: outbox rows parked
	OutcomeMismatches int `json:"outcome_mismatches"` // producer told committed/rolled back, database says otherwise
	Unrecorded        int `json:"unrecorded"`         // business rows without an attempt record
	Early             int `json:"delayed_early"`      // D1: a delayed event handled from a delivery received before its due time
	LateDelayed       int `json:"delayed_late"`       // D2: a delayed event first handled more than LateBound after its due time

	// Delayed events handled, and the lateness of their first handling
	// (received at minus due at), in milliseconds. Informational.
	Delayed        int     `json:"delayed_handled"`
	DelayedLateP50 float64 `json:"delayed_late_p50_ms"`
	DelayedLateP99 float64 `json:"delayed_late_p99_ms"`
	DelayedLateMax float64 `json:"delayed_late_max_ms"`

	// Informational, not violations.
	BrokerCopies            int `json:"broker_extra_copies"`       // second copies stored (consumers drop them)
	KeysMovedBroker         int `json:"keys_moved_broker"`         // ordered keys stored on more than one broker (cluster fail-over; informational)
	ReconciledOrdered       int `json:"reconciled_ordered"`        // ordered events a reconciler published again, left out of the I5 checks (informational)
	MovedKeyInversions      int `json:"moved_key_inversions"`      // handler inversions of those keys: an event stored on a broker that then died is handled when it returns (informational)
	SweeperOnly             int `json:"sweeper_only"`              // committed events only the sweeper's republish stored
	ConsumerOrderInversions int `json:"consumer_order_inversions"` // tx mode: its consumer is concurrent, handling order is not promised

	Examples []string `json:"-"`
}

// modeCounts are one mode's transactions.
type modeCounts struct {
	Attempted  int `json:"attempted"`
	Committed  int `json:"committed"`
	RolledBack int `json:"rolled_back"`
	// Unknown is how many the producer could not tell (it died under them,
	// or the commit's answer was lost); UnknownCommitted of them did commit.
	Unknown          int `json:"unknown"`
	UnknownCommitted int `json:"unknown_committed"`
}

func (v *verdict) violations() int {
	return v.Lost + v.Phantom + v.DuplicateEffects + v.Disagreements + v.OrderViolations + v.HandlerInversions +
		v.Pending + v.Parked + v.OutcomeMismatches + v.Unrecorded + v.Early + v.LateDelayed
}

// earlyTolerance: TXMSG_DELIVER_AT carries the due time rounded up to the
// millisecond, so a delivery within that millisecond is on time.
const earlyTolerance = time.Millisecond

// checkDelayed checks D1 (no delayed event is received before its due
// time, on any delivery) and D2 (each is first handled within LateBound
// after it), and measures the lateness of the first handling.
func checkDelayed(s *snapshot, v *verdict) {
	first := map[string]time.Duration{}
	for _, e := range s.Effects {
		if e.DueAt == nil {
			continue
		}
		late := e.ReceivedAt.Sub(*e.DueAt)
		if late < -earlyTolerance {
			v.Early++
			v.example("D1 early: %s event %s received %v before its due time", e.Mode, e.MsgID, -late)
		}
		if _, seen := first[e.MsgID]; !seen {
			first[e.MsgID] = late // effects are in insertion order
		}
	}
	lates := make([]time.Duration, 0, len(first))
	for id, late := range first {
		lates = append(lates, late)
		if s.LateBound > 0 && late > s.LateBound {
			v.LateDelayed++
			v.example("D2 late: delayed event %s first handled %v after its due time (bound %v)", id, late.Round(time.Millisecond), s.LateBound)
		}
	}
	v.Delayed = len(lates)
	if len(lates) == 0 {
		return
	}
	slices.Sort(lates)
	pct := func(p int) float64 {
		i := (len(lates)*p + 99) / 100
		return float64(lates[max(i-1, 0)]) / float64(time.Millisecond)
	}
	v.DelayedLateP50, v.DelayedLateP99 = pct(50), pct(99)
	v.DelayedLateMax = float64(lates[len(lates)-1]) / float64(time.Millisecond)
}

const maxExamples = 25

func (v *verdict) example(format string, args ...any) {
	if len(v.Examples) < maxExamples {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

// evaluate checks I1–I6 (I5 on the outbox topic, which ordered relays
// publish) and D1–D2 (delayed events) against s.
func evaluate(s *snapshot) *verdict {
	v := &verdict{Modes: map[string]*modeCounts{}}
	for _, m := range modes {
		v.Modes[m] = &modeCounts{}
	}
	mc := func(mode string) *modeCounts {
		if v.Modes[mode] == nil {
			v.Modes[mode] = &modeCounts{}
		}
		return v.Modes[mode]
	}

	// Producer side: what each attempt became.
	for id, a := range s.Attempts {
		c := mc(a.Mode)
		c.Attempted++
		_, committed := s.Orders[id]
		if committed {
			c.Committed++
		} else {
			c.RolledBack++
		}
		switch a.Outcome {
		case outcomeCommitted:
			if !committed {
				v.OutcomeMismatches++
				v.example("outcome: %s %s reported committed, no order row", a.Mode, id)
			}
		case outcomeRolledBack:
			if committed {
				v.OutcomeMismatches++
				v.example("outcome: %s %s reported rolled back (%s), but its order row committed", a.Mode, id, a.Err)
			}
		default:
			c.Unknown++
			if committed {
				c.UnknownCommitted++
			}
		}
		if a.Rollback && committed {
			v.OutcomeMismatches++
			v.example("outcome: %s %s failed its business logic, but its order row committed", a.Mode, id)
		}
	}
	for id, o := range s.Orders {
		if s.Attempts[id] == nil {
			v.Unrecorded++
			v.example("unrecorded: %s order %s has no attempt record", o.Mode, id)
		}
	}

	// Consumer side: I1, I2, I3.
	effects := map[string]int{}
	for _, e := range s.Effects {
		effects[e.MsgID]++
	}
	for id, o := range s.Orders {
		if effects[id] == 0 {
			v.Lost++
			v.example("I1 lost: %s order %s (key %s seq %d) has no effect", o.Mode, id, o.ShardKey, o.Seq)
		}
	}
	for id, n := range effects {
		if _, ok := s.Orders[id]; !ok {
			v.Phantom++
			outcome := "never attempted"
			if a := s.Attempts[id]; a != nil {
				outcome = fmt.Sprintf("producer said %q, business rollback %v", a.Outcome, a.Rollback)
			}
			v.example("I2 phantom: effect for %s, which did not commit (%s)", id, outcome)
		}
		if n > 1 {
			v.DuplicateEffects += n - 1
			v.example("I3 duplicate: %s applied %d times", id, n)
		}
	}

	// I4: the business rows, the barrier or outbox rows and the broker
	// agree.
	stored := map[string]map[string]int{}
	for mode, msgs := range s.Stored {
		stored[mode] = map[string]int{}
		for _, m := range msgs {
			stored[mode][m.ID]++
		}
		for _, n := range stored[mode] {
			if n > 1 {
				v.BrokerCopies += n - 1
			}
		}
	}
	disagree := func(format string, args ...any) {
		v.Disagreements++
		v.example("I4 "+format, args...)
	}
	for id, o := range s.Orders {
		switch o.Mode {
		case modeTx:
			if s.Barrier[id] != checker.StateCommitted {
				disagree("tx order %s has barrier state %q", id, s.Barrier[id])
			}
		case modeOutbox:
			if _, ok := s.Outbox[id]; !ok {
				disagree("outbox order %s has no outbox row", id)
			}
		}
	}
	for id, state := range s.Barrier {
		if state == checker.StateCommitted {
			if _, ok := s.Orders[id]; !ok {
				disagree("barrier %s committed without its order row", id)
			}
			if stored[modeTx][id] == 0 {
				disagree("barrier %s committed, but the broker never stored its event", id)
			}
		}
	}
	for id := range stored[modeTx] {
		if s.Barrier[id] != checker.StateCommitted {
			disagree("the broker stored %s, whose barrier state is %q", id, s.Barrier[id])
		}
	}
	if s.TxGroup != "" {
		viaCommit := map[string]bool{}
		for _, m := range s.Stored[modeTx] {
			// A delayed event reaches the topic through the forwarder,
			// after its half message committed in the delay topic.
			if m.Group == s.TxGroup || m.Delayed {
				viaCommit[m.ID] = true
			}
		}
		for id := range stored[modeTx] {
			if !viaCommit[id] {
				v.SweeperOnly++
			}
		}
	}
	for id, status := range s.Outbox {
		if _, ok := s.Orders[id]; !ok {
			disagree("outbox row %s without its order row", id)
		}
		if status == outbox.StatusSent && stored[modeOutbox][id] == 0 {
			disagree("outbox row %s sent, but the broker never stored it", id)
		}
		switch status {
		case outbox.StatusPending:
			v.Pending++
			v.example("I6 pending: outbox row %s", id)
		case outbox.StatusParked:
			v.Parked++
			v.example("I6 parked: outbox row %s", id)
		}
	}
	for id := range stored[modeOutbox] {
		if _, ok := s.Outbox[id]; !ok {
			disagree("the broker stored %s, which has no outbox row", id)
		}
	}

	// I5: in stored order, the first copy of each key's events comes in
	// sequence order, all on one queue.
	moved := map[string]bool{}
	var ordered []storedMsg
	for _, m := range s.Stored[modeOutbox] {
		if s.Reconciled[m.ID] {
			v.ReconciledOrdered++
			continue
		}
		ordered = append(ordered, m)
	}
	v.OrderViolations = checkStoredOrder(ordered, v, moved)
	// A key stored on two brokers was re-hashed while its broker was down:
	// an event that broker stored just before it died is handled only when
	// it returns, after the key's later events on the other broker.
	// RocketMQ's hash selection gives no order across that, so such keys
	// are counted apart.
	var kept, movedEffects []effectRow
	for _, e := range s.Effects {
		if s.Reconciled[e.MsgID] {
			continue
		}
		if e.Mode == modeOutbox && moved[e.ShardKey] {
			movedEffects = append(movedEffects, e)
		} else {
			kept = append(kept, e)
		}
	}
	v.HandlerInversions = consumerInversions(kept, modeOutbox, v)
	v.MovedKeyInversions = consumerInversions(movedEffects, modeOutbox, nil)
	v.ConsumerOrderInversions = consumerInversions(s.Effects, modeTx, nil)
	checkDelayed(s, v)
	return v
}

// checkStoredOrder checks I5 in stored order and records in moved the keys
// stored on more than one broker.
func checkStoredOrder(msgs []storedMsg, v *verdict, moved map[string]bool) int {
	byKey := map[string][]storedMsg{}
	for _, m := range msgs {
		byKey[m.Key] = append(byKey[m.Key], m)
	}
	bad := 0
	for key, ms := range byKey {
		if key == "" {
			continue
		}
		// A key whose broker went down moves to a queue of another broker
		// (the sharding-key hash runs over the queues the route still has):
		// on a cluster that is expected, and counted apart. Order is then
		// checked within each broker, where offsets compare.
		byBroker := map[string][]storedMsg{}
		for _, m := range ms {
			byBroker[m.Broker] = append(byBroker[m.Broker], m)
		}
		if len(byBroker) > 1 {
			v.KeysMovedBroker++
			moved[key] = true
		}
		for _, seg := range byBroker {
			bad += checkKeyOrder(key, seg, v)
		}
	}
	return bad
}

// checkKeyOrder checks the stored copies of one key on one broker: one
// queue, sequence order.
func checkKeyOrder(key string, ms []storedMsg, v *verdict) int {
	bad := 0
	{
		sort.Slice(ms, func(i, j int) bool { return ms[i].Offset < ms[j].Offset })
		queue := ms[0].Queue
		first := map[string]bool{}
		last := 0
		for _, m := range ms {
			if m.Queue != queue {
				bad++
				v.example("I5 key %s stored on queues %d and %d of %s", key, queue, m.Queue, m.Broker)
				break
			}
			if first[m.ID] {
				continue // a second copy: consumers drop it
			}
			first[m.ID] = true
			if m.Seq <= last {
				bad++
				v.example("I5 key %s: seq %d stored after seq %d (offset %d)", key, m.Seq, last, m.Offset)
			}
			last = max(last, m.Seq)
		}
	}
	return bad
}

// consumerInversions counts, per key, effects of mode written after an
// effect with a higher sequence number; with v set, it records examples as
// I5 violations. Effects are in id order, which for the rows of one key
// handled by the ordered consumer is handling order: each is inserted
// after the previous one committed.
func consumerInversions(effects []effectRow, mode string, v *verdict) int {
	last := map[string]int{}
	n := 0
	for _, e := range effects {
		if e.Mode != mode {
			continue
		}
		if e.Seq < last[e.ShardKey] {
			n++
			if v != nil {
				v.example("I5 handler: key %s seq %d handled after seq %d", e.ShardKey, e.Seq, last[e.ShardKey])
			}
		}
		last[e.ShardKey] = max(last[e.ShardKey], e.Seq)
	}
	return n
}

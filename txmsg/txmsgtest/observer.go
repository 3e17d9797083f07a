package txmsgtest

import (
	"sync"
	"testing"
	"time"

	"github.com/txmsg/txmsg/txmsg"
)

// Observer reports what a consumer of the suite's topic received.
type Observer interface {
	// Delivered returns every delivery so far of the message whose txmsg
	// ID ([txmsg.PropertyID]) is id, oldest first, or none. Each is the
	// message as the consumer received it: Topic, Tag, Keys (the broker
	// may add the ID to them), ShardingKey, Body and the user Properties.
	Delivered(id string) []*txmsg.Message
}

// Recorder is an [Observer] that a consumer feeds: call Record for every
// message the consumer of the topic receives, duplicates included (a
// consumer with an inbox drops duplicates and would hide them). It is
// safe for concurrent use; its zero value is ready.
type Recorder struct {
	mu   sync.Mutex
	byID map[string][]*txmsg.Message
}

// Record notes one delivery of m, under m.ID.
func (r *Recorder) Record(m *txmsg.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string][]*txmsg.Message{}
	}
	r.byID[m.ID] = append(r.byID[m.ID], m)
}

// Delivered implements [Observer].
func (r *Recorder) Delivered(id string) []*txmsg.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*txmsg.Message(nil), r.byID[id]...)
}

const (
	// deliveryWait is how long a delivery may take.
	deliveryWait = time.Minute
	// duplicateWatch is how long after a first delivery a second one is
	// watched for.
	duplicateWatch = 2 * time.Second
	// quiet is how long a message that must never arrive is watched for:
	// several rounds of a test broker's check-backs.
	quiet = 4 * time.Second
	poll  = 50 * time.Millisecond
)

// deliveredOnce waits for id's first delivery, checks that no second
// copy follows and returns the delivery.
func deliveredOnce(t testing.TB, o Observer, id string) *txmsg.Message {
	t.Helper()
	return deliveredOnceEach(t, o, id)[0]
}

// deliveredOnceEach waits for the first delivery of each of ids, checks
// that no second copy of any follows and returns the deliveries.
func deliveredOnceEach(t testing.TB, o Observer, ids ...string) []*txmsg.Message {
	t.Helper()
	deadline := time.Now().Add(deliveryWait)
	for _, id := range ids {
		for len(o.Delivered(id)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("message %s was not delivered within %s", id, deliveryWait)
			}
			time.Sleep(poll)
		}
	}
	end := time.Now().Add(duplicateWatch)
	for {
		for _, id := range ids {
			if n := len(o.Delivered(id)); n > 1 {
				t.Fatalf("message %s delivered %d times, want once", id, n)
			}
		}
		if time.Now().After(end) {
			break
		}
		time.Sleep(poll)
	}
	out := make([]*txmsg.Message, len(ids))
	for i, id := range ids {
		out[i] = o.Delivered(id)[0]
	}
	return out
}

// neverDelivered checks that none of ids arrives within quiet.
func neverDelivered(t testing.TB, o Observer, ids ...string) {
	t.Helper()
	end := time.Now().Add(quiet)
	for {
		for _, id := range ids {
			if n := len(o.Delivered(id)); n > 0 {
				t.Fatalf("message %s delivered %d times; it must never be", id, n)
			}
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(poll)
	}
}

// checkFields fails t when got lacks what was sent in want.
func checkFields(t testing.TB, want, got *txmsg.Message) {
	t.Helper()
	if string(got.Body) != string(want.Body) {
		t.Errorf("message %s: body %q delivered, %q sent", want.ID, got.Body, want.Body)
	}
	if got.Topic != want.Topic {
		t.Errorf("message %s: delivered on topic %q, sent to %q", want.ID, got.Topic, want.Topic)
	}
	if got.Tag != want.Tag {
		t.Errorf("message %s: tag %q delivered, %q sent", want.ID, got.Tag, want.Tag)
	}
	if got.ShardingKey != want.ShardingKey {
		t.Errorf("message %s: sharding key %q delivered, %q sent", want.ID, got.ShardingKey, want.ShardingKey)
	}
	for _, k := range want.Keys {
		found := false
		for _, g := range got.Keys {
			found = found || g == k
		}
		if !found {
			t.Errorf("message %s: key %q sent, delivered keys %q", want.ID, k, got.Keys)
		}
	}
	for k, v := range want.Properties {
		if got.Properties[k] != v {
			t.Errorf("message %s: property %s=%q sent, %q delivered", want.ID, k, v, got.Properties[k])
		}
	}
}

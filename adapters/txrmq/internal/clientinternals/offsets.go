package clientinternals

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// Names of what the offset functions reach.
const (
	fieldStorage     = "storage"     // *defaultConsumer (promoted): consumer.OffsetStore, set by Start
	fieldOffsetTable = "OffsetTable" // *remoteBrokerOffsetStore: map[primitive.MessageQueue]int64
	fieldOffsetMutex = "mutex"       // *remoteBrokerOffsetStore: sync.RWMutex guarding OffsetTable
)

// offsetStore is the client's in-memory table of a clustering consumer's
// consumed offsets (*consumer.remoteBrokerOffsetStore), which the client
// sends to the broker every 5 s, on every pull (when positive), and when
// it gives a queue up.
type offsetStore struct {
	mu    *sync.RWMutex
	table reflect.Value // map[primitive.MessageQueue]int64
}

// storeOf returns the offset store of a started consumer, or of store
// itself when it is one (the value consumer.NewRemoteOffsetStore returns).
func storeOf(c any) (offsetStore, error) {
	var s offsetStore
	v := reflect.ValueOf(c)
	if f, err := field(v, fieldStorage); err == nil {
		if f.Kind() != reflect.Interface {
			return s, fmt.Errorf("%s.%s is %s, not an interface", v.Type(), fieldStorage, f.Type())
		}
		if f.IsNil() {
			return s, errors.New("the consumer has no offset store yet (not started)")
		}
		v = f.Elem()
	}
	t, err := field(v, fieldOffsetTable)
	if err != nil {
		return s, err
	}
	if t.Type() != reflect.TypeOf(map[primitive.MessageQueue]int64(nil)) {
		return s, fmt.Errorf("%s.%s is %s, not map[primitive.MessageQueue]int64", v.Type(), fieldOffsetTable, t.Type())
	}
	m, err := field(v, fieldOffsetMutex)
	if err != nil {
		return s, err
	}
	mu, ok := m.Addr().Interface().(*sync.RWMutex)
	if !ok {
		return s, fmt.Errorf("%s.%s is %s, not sync.RWMutex", v.Type(), fieldOffsetMutex, m.Type())
	}
	s.mu, s.table = mu, t
	return s, nil
}

// ConsumedOffset returns what the client of a started clustering consumer
// (push or pull) holds in memory as mq's consumed offset: the offset its
// next persist sends to the broker. -1 means the client found no offset on
// the broker and has nothing to send yet; ok is false when the client has
// no entry for mq.
func ConsumedOffset(c any, mq primitive.MessageQueue) (offset int64, ok bool, err error) {
	defer guard(&err)
	s, err := storeOf(c)
	if err != nil {
		return 0, false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	v := s.table.MapIndex(reflect.ValueOf(mq))
	if !v.IsValid() {
		return 0, false, nil
	}
	return v.Int(), true, nil
}

// RaiseConsumedOffset sets mq's in-memory consumed offset to offset unless
// the client holds a higher one, as the client's own increase-only update
// does, under the client's lock. It returns the offset the client holds
// afterwards.
func RaiseConsumedOffset(c any, mq primitive.MessageQueue, offset int64) (now int64, err error) {
	defer guard(&err)
	s, err := storeOf(c)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := reflect.ValueOf(mq)
	if v := s.table.MapIndex(key); v.IsValid() && v.Int() >= offset {
		return v.Int(), nil
	}
	s.table.SetMapIndex(key, reflect.ValueOf(offset))
	return offset, nil
}

// HeldQueues returns the message queues a started consumer (push or pull)
// holds now: those its rebalance assigned to it, each with a pull under
// way.
func HeldQueues(c any) (mqs []primitive.MessageQueue, err error) {
	defer guard(&err)
	p, err := queuePartsOf(c)
	if err != nil {
		return nil, err
	}
	p.table.Range(func(k, _ any) bool {
		mq, ok := k.(primitive.MessageQueue)
		if !ok {
			err = fmt.Errorf("process queue table key is %T, not primitive.MessageQueue", k)
			return false
		}
		mqs = append(mqs, mq)
		return true
	})
	return mqs, err
}

// CheckOffsets reaches what [ConsumerRequester], [ConsumedOffset],
// [RaiseConsumedOffset] and [HeldQueues] use, on a push or pull consumer c
// built by the client's constructors, without calling anything that talks
// to the network. The offset store exists only once c has started, so its
// fields are reached on store, an offset store as
// consumer.NewRemoteOffsetStore returns it.
func CheckOffsets(c, store any) (err error) {
	defer guard(&err)
	if _, err := commandPartsOf(c); err != nil {
		return err
	}
	v := reflect.ValueOf(c)
	f, err := field(v, fieldStorage)
	if err != nil {
		return err
	}
	if f.Kind() != reflect.Interface {
		return fmt.Errorf("%s.%s is %s, not an interface", v.Type(), fieldStorage, f.Type())
	}
	if store != nil && !reflect.TypeOf(store).Implements(f.Type()) {
		return fmt.Errorf("%T is not a %s", store, f.Type())
	}
	if _, err := storeOf(store); err != nil {
		return fmt.Errorf("offset store: %w", err)
	}
	if _, err := HeldQueues(c); err != nil {
		return err
	}
	return nil
}

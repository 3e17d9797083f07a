package clientinternals

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// Names of what the offset functions reach.
const (
	fieldStorage      = "storage"     // *defaultConsumer (promoted): consumer.OffsetStore, set by Start
	fieldOffsetTable  = "OffsetTable" // *remoteBrokerOffsetStore: map[primitive.MessageQueue]int64
	fieldOffsetMutex  = "mutex"       // *remoteBrokerOffsetStore: sync.RWMutex guarding OffsetTable
	methodInvokeSync  = "InvokeSync"  // internal.RMQClient
	fieldCmdCode      = "Code"        // remote.RemotingCommand (exported fields)
	fieldCmdLanguage  = "Language"
	fieldCmdVersion   = "Version"
	fieldCmdOpaque    = "Opaque"
	fieldCmdExtFields = "ExtFields"
	fieldCmdRemark    = "Remark"
	// remotingVersion and languageGo are what the client's own requests
	// carry (remote._Version, remote._Go).
	remotingVersion = 317
	languageGo      = 9
)

// Response is a broker's answer to a [Requester] call.
type Response struct {
	Code   int16
	Fields map[string]string
	Remark string
}

// Requester sends one request of RocketMQ's remoting protocol (code and
// header fields, no body) to the broker at addr and returns its answer.
type Requester func(ctx context.Context, addr string, code int16, fields map[string]string, timeout time.Duration) (Response, error)

// opaques numbers the requests sent through a Requester. The client
// numbers its own from 1 upwards in one counter per process, and matches
// answers to requests by that number; these count down from -1, so the two
// meet only after some four billion requests.
var opaques atomic.Int32

// commandParts are what a Requester needs of the client behind a consumer.
type commandParts struct {
	invoke  reflect.Value // InvokeSync(ctx, addr string, *remote.RemotingCommand, time.Duration) (*remote.RemotingCommand, error)
	cmdType reflect.Type  // remote.RemotingCommand
}

var (
	ctxType      = reflect.TypeOf((*context.Context)(nil)).Elem()
	durationType = reflect.TypeOf(time.Duration(0))
	errorType    = reflect.TypeOf((*error)(nil)).Elem()
)

func commandPartsOf(c any) (commandParts, error) {
	var p commandParts
	cl, err := clientOf(reflect.ValueOf(c))
	if err != nil {
		return p, err
	}
	m := cl.MethodByName(methodInvokeSync)
	if !m.IsValid() {
		return p, fmt.Errorf("client has no %s", methodInvokeSync)
	}
	t := m.Type()
	if t.NumIn() != 4 || t.In(0) != ctxType || t.In(1).Kind() != reflect.String || t.In(3) != durationType ||
		t.NumOut() != 2 || t.Out(1) != errorType || t.In(2) != t.Out(0) ||
		t.In(2).Kind() != reflect.Pointer || t.In(2).Elem().Kind() != reflect.Struct {
		return p, fmt.Errorf("client's %s is %s, not func(context.Context, string, *Command, time.Duration) (*Command, error)", methodInvokeSync, t)
	}
	ct := t.In(2).Elem()
	for name, kind := range map[string]reflect.Kind{
		fieldCmdCode: reflect.Int16, fieldCmdLanguage: reflect.Uint8, fieldCmdVersion: reflect.Int16,
		fieldCmdOpaque: reflect.Int32, fieldCmdExtFields: reflect.Map, fieldCmdRemark: reflect.String,
	} {
		f, ok := ct.FieldByName(name)
		if !ok || !f.IsExported() || f.Type.Kind() != kind {
			return p, fmt.Errorf("%s has no exported %s field %s", ct, kind, name)
		}
	}
	if f, _ := ct.FieldByName(fieldCmdExtFields); f.Type != reflect.TypeOf(map[string]string(nil)) {
		return p, fmt.Errorf("%s.%s is %s, not map[string]string", ct, fieldCmdExtFields, f.Type)
	}
	p.invoke, p.cmdType = m, ct
	return p, nil
}

// ConsumerRequester returns a [Requester] that sends through the client
// behind a push or pull consumer (as the client's constructors return
// them): the client's connections, and its request signing when the
// consumer has credentials (set up when the consumer starts).
//
// Why: the client keeps a new group's start offset only in memory and has
// no public call that asks the broker for a group's committed offset
// without its "start at 0" rule, nor one that commits an offset and waits
// for the answer (see package txrmq's start-offset pinning).
func ConsumerRequester(c any) (r Requester, err error) {
	defer guard(&err)
	p, err := commandPartsOf(c)
	if err != nil {
		return nil, err
	}
	return p.request, nil
}

func (p commandParts) request(ctx context.Context, addr string, code int16, fields map[string]string, timeout time.Duration) (resp Response, err error) {
	defer guard(&err)
	cmd := reflect.New(p.cmdType)
	e := cmd.Elem()
	e.FieldByName(fieldCmdCode).SetInt(int64(code))
	e.FieldByName(fieldCmdLanguage).SetUint(languageGo)
	e.FieldByName(fieldCmdVersion).SetInt(remotingVersion)
	e.FieldByName(fieldCmdOpaque).SetInt(int64(opaques.Add(-1)))
	ext := make(map[string]string, len(fields))
	for k, v := range fields {
		ext[k] = v
	}
	e.FieldByName(fieldCmdExtFields).Set(reflect.ValueOf(ext))
	out := p.invoke.Call([]reflect.Value{reflect.ValueOf(&ctx).Elem(), reflect.ValueOf(addr), cmd, reflect.ValueOf(timeout)})
	if ierr, _ := out[1].Interface().(error); ierr != nil {
		return resp, ierr
	}
	if out[0].IsNil() {
		return resp, errors.New("no answer")
	}
	a := out[0].Elem()
	resp.Code = int16(a.FieldByName(fieldCmdCode).Int())
	resp.Remark = a.FieldByName(fieldCmdRemark).String()
	if f, ok := a.FieldByName(fieldCmdExtFields).Interface().(map[string]string); ok {
		resp.Fields = f
	}
	return resp, nil
}

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

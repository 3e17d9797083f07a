package clientinternals

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// Names of what PendingRequests reaches.
const (
	fieldRemoteClient  = "remoteClient"  // *rmqClient: remote.RemotingClient
	fieldResponseTable = "responseTable" // *remotingClient: sync.Map, opaque (int32) → *ResponseFuture
)

// PendingRequests returns the request numbers (opaques, which only grow) of
// the requests the client behind component (a producer or a consumer, as
// the client's constructors return them) has sent and still waits an
// answer for. A request sent on a connection a broker's death closed stays
// there until its own timeout.
func PendingRequests(component any) (opaques []int32, err error) {
	defer guard(&err)
	rc, err := clientField(component, fieldRemoteClient)
	if err != nil {
		return nil, err
	}
	if rc.Kind() != reflect.Interface || rc.IsNil() {
		return nil, fmt.Errorf("client's %s is not a non-nil interface", fieldRemoteClient)
	}
	t, err := field(rc.Elem(), fieldResponseTable)
	if err != nil {
		return nil, err
	}
	table, ok := t.Addr().Interface().(*sync.Map)
	if !ok {
		return nil, fmt.Errorf("%s is %s, not sync.Map", fieldResponseTable, t.Type())
	}
	table.Range(func(k, _ any) bool {
		o, ok := k.(int32)
		if !ok {
			err = fmt.Errorf("%s key %T is not int32", fieldResponseTable, k)
			return false
		}
		opaques = append(opaques, o)
		return true
	})
	return opaques, err
}

// Names of what ConsumerRequester reaches.
const (
	methodInvokeSync  = "InvokeSync" // internal.RMQClient
	fieldCmdCode      = "Code"       // remote.RemotingCommand (exported fields)
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

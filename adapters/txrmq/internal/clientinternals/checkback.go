package clientinternals

import (
	"fmt"
	"reflect"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// fieldCallbackCh is the *defaultProducer's channel of check-back requests:
// the client's check-back handler sends each one there (unbuffered), and
// only a transaction producer's loop reads it.
const fieldCallbackCh = "callbackCh"

// InnerProducer returns the plain producer inside a transaction producer,
// which implements rmq.Producer: sends through it share the transaction
// producer's client, and so its check-back channel.
func InnerProducer(txp any) (p any, err error) {
	defer guard(&err)
	dp, err := txInner(txp)
	if err != nil {
		return nil, err
	}
	return dp.Interface(), nil
}

// CallbackChannel returns the check-back channel of a plain producer, or of
// the producer inside a transaction producer, and its client (compare
// clients to tell whether two producers share one).
func CallbackChannel(producer any) (ch chan interface{}, client any, err error) {
	defer guard(&err)
	v := reflect.ValueOf(producer)
	if inner, ierr := txInner(producer); ierr == nil {
		v = inner
	}
	f, err := field(v, fieldCallbackCh)
	if err != nil {
		return nil, nil, err
	}
	ch, ok := f.Interface().(chan interface{})
	if !ok {
		return nil, nil, fmt.Errorf("%s.%s is %s, not chan interface{}", v.Type(), fieldCallbackCh, f.Type())
	}
	c, err := clientOf(v)
	if err != nil {
		return nil, nil, err
	}
	return ch, c.Interface(), nil
}

// CheckBackMessage returns the half message of one request read off a
// callback channel (the client's *internal.CheckTransactionStateCallback,
// exported field Msg), or nil.
func CheckBackMessage(request interface{}) (ext *primitive.MessageExt) {
	defer func() {
		if recover() != nil {
			ext = nil
		}
	}()
	v := reflect.ValueOf(request)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName("Msg")
	if !f.IsValid() || !f.CanInterface() {
		return nil
	}
	ext, _ = f.Interface().(*primitive.MessageExt)
	return ext
}

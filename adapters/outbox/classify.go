package outbox

import (
	"context"
	"errors"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// classify decides, for each failed message of one Publish call, whether
// the broker refused the message, which counts toward MaxAttempts, or the
// broker or the route failed, which does not: such errors are wrapped as
// [txmsg.ErrUnavailable]. A Publisher says which by wrapping
// txmsg.ErrRejected or txmsg.ErrUnavailable; an error that says neither
// is a broker failure when every message of the call failed the same way,
// and the message's own failure otherwise.
func (r *Relay) classify(ctx context.Context, errs []error) {
	same := true
	for _, e := range errs {
		if e == nil || e.Error() != errs[0].Error() {
			same = false
			break
		}
	}
	waiting := 0
	var first error
	for i, e := range errs {
		switch {
		case e == nil || rejected(e):
			continue
		case txmsg.IsUnavailable(e):
		case same:
			errs[i] = &brokerError{err: e}
		default:
			continue
		}
		waiting++
		if first == nil {
			first = e
		}
	}
	if waiting > 0 {
		driver.RelayUnavailable(r.cfg.Hooks, ctx, r.cfg.Name, r.table, waiting, first)
	}
}

// rejected reports whether err is a failure of the message itself.
func rejected(err error) bool {
	var pe *txmsg.PanicError
	return errors.Is(err, txmsg.ErrRejected) || errors.Is(err, txmsg.ErrInvalidMessage) || errors.As(err, &pe)
}

// brokerError marks an unclassified error that failed a whole Publish
// call as the broker's.
type brokerError struct{ err error }

func (e *brokerError) Error() string        { return e.err.Error() }
func (e *brokerError) Unwrap() error        { return e.err }
func (e *brokerError) Is(target error) bool { return target == txmsg.ErrUnavailable }

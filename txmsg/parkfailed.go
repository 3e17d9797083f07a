package txmsg

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// parkFailed parks r in the parked table after its handler failed for
// the last time, with cause (the handler's last error), and reports it to
// the inbox's HookConsumed hooks with [OutcomeParked]. Consumers that retry
// in place instead of through the broker (ordered consumers) use it when
// they give up on a message, so that it is kept, visible and replayable
// like an undecodable one, and the queue behind it can go on.
//
// A second parkFailed of the same (group, message ID) stores nothing more
// (the hooks see it again). An error means nothing was parked and the
// message must not be skipped.
func (in *Inbox) parkFailed(ctx context.Context, group string, r *Received, cause error) error {
	if r == nil || r.Message == nil {
		return fmt.Errorf("%w: received message is nil", ErrInvalidMessage)
	}
	if cause == nil {
		cause = errors.New("handler failed")
	}
	start := time.Now()
	if err := in.park(ctx, group, r, fmt.Errorf("handler failed %d times, last error: %w", r.Attempt, cause)); err != nil {
		return err
	}
	in.clearFailure(ctx, group, r.Message.ID)
	in.hooks.consumed(ctx, group, r, OutcomeParked, nil, time.Since(start))
	return nil
}

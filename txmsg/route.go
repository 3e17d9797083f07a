package txmsg

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Route binds a typed [Handler] to a topic. Consumers take Routes, and for
// each message they receive the route decodes the body, dedupes through the
// [Inbox] and runs the handler.
type Route struct {
	topic   string
	tags    string
	process func(ctx context.Context, in *Inbox, group string, r *Received) (Outcome, error)
	err     error // set by Handle when the route can never work
}

// RouteOption changes a Route.
type RouteOption func(*Route)

// WithTags subscribes to a tag expression such as "created || paid"
// instead of all tags.
func WithTags(expr string) RouteOption { return func(r *Route) { r.tags = expr } }

// Handle returns a Route that decodes messages of topic with its codec and
// passes them to h.
func Handle[T any](topic Topic[T], h Handler[T], opts ...RouteOption) Route {
	codec := topic.codec()
	r := Route{topic: topic.Name, tags: "*"}
	for _, opt := range opts {
		opt(&r)
	}
	if h == nil {
		err := fmt.Errorf("%w: handler for topic %q is nil", ErrInvalidConfig, topic.Name)
		r.err = err
		r.process = func(context.Context, *Inbox, string, *Received) (Outcome, error) { return 0, err }
		return r
	}
	r.process = func(ctx context.Context, in *Inbox, group string, rec *Received) (Outcome, error) {
		event, err := codec.Decode(rec.Message.Body)
		if err != nil {
			if perr := in.park(ctx, group, rec, err); perr != nil {
				return 0, perr
			}
			return OutcomeParked, nil
		}
		return in.run(ctx, group, rec.Message.Topic, rec.Message.ID, func(ctx context.Context, tx *gorm.DB) error {
			return h(ctx, tx, Delivery[T]{
				Event:           event,
				Message:         rec.Message,
				BrokerMessageID: rec.BrokerMessageID,
				Group:           group,
				Attempt:         rec.Attempt,
				DueAt:           rec.DueAt,
				ReceivedAt:      rec.ReceivedAt,
			})
		})
	}
	return r
}

// Topic returns the route's topic.
func (r Route) Topic() string { return r.topic }

// Tags returns the route's tag expression; "*" means all tags.
func (r Route) Tags() string { return r.tags }

// Validate reports whether the route can be subscribed.
func (r Route) Validate() error {
	if r.process == nil {
		return fmt.Errorf("%w: route is empty; build it with txmsg.Handle", ErrInvalidConfig)
	}
	if r.err != nil {
		return r.err
	}
	if err := ValidateTopic(r.topic); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if strings.TrimSpace(r.tags) == "" {
		return fmt.Errorf("%w: route for %q has an empty tag expression", ErrInvalidConfig, r.topic)
	}
	return nil
}

// handle handles one received message for group: decode, dedupe, run the
// handler. A nil error means the message may be acknowledged (it was
// handled, was a duplicate, or was parked); an error means the broker should
// deliver it again. A panic outside the handler's transaction (in the
// codec, say) is returned as a [*PanicError], like the handler's own, so
// the hooks see that attempt too. A failure is recorded in the inbox's
// failing table, and a later success removes it (see [FailingRow]).
func (r Route) handle(ctx context.Context, in *Inbox, group string, rec *Received) (Outcome, error) {
	if rec == nil || rec.Message == nil {
		return 0, fmt.Errorf("%w: received message is nil", ErrInvalidMessage)
	}
	if len(in.hooks) == 0 {
		outcome, err := r.processRecovering(ctx, in, group, rec)
		in.noteOutcome(ctx, group, rec, err)
		return outcome, err
	}
	start := time.Now()
	ctx = in.hooks.beforeHandle(ctx, group, rec)
	outcome, err := r.processRecovering(ctx, in, group, rec)
	in.hooks.consumed(ctx, group, rec, outcome, err, time.Since(start))
	in.noteOutcome(ctx, group, rec, err)
	return outcome, err
}

// processRecovering runs r.process, turning a panic into a *PanicError.
func (r Route) processRecovering(ctx context.Context, in *Inbox, group string, rec *Received) (outcome Outcome, err error) {
	defer func() {
		if v := recover(); v != nil {
			outcome, err = 0, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return r.process(ctx, in, group, rec)
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "{}", err
	}
	return string(b), nil
}

func joinKeys(keys []string) string { return strings.Join(keys, " ") }

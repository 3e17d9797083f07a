package txmsg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

type recordingHook struct{ events []string }

func (h *recordingHook) BeforeSend(_ context.Context, m *Message) {
	h.events = append(h.events, "before-send")
	if m.Properties == nil {
		m.Properties = map[string]string{}
	}
	m.Properties["traceparent"] = "00-abc"
}

func (h *recordingHook) BeforeHandle(ctx context.Context, group string, _ *Received) context.Context {
	h.events = append(h.events, "before-handle "+group)
	return context.WithValue(ctx, ctxKey{}, "span")
}

func (h *recordingHook) OnConsumed(ctx context.Context, group string, _ *Received, o Outcome, err error, _ time.Duration) {
	h.events = append(h.events, "consumed "+o.String()+" "+ctx.Value(ctxKey{}).(string))
}

type panickingHook struct{}

func (panickingHook) OnHalfSent(context.Context, *Message, error, time.Duration) { panic("bad hook") }

func TestHooksDispatchOnlyImplementedAndSurvivePanics(t *testing.T) {
	t.Parallel()
	rec := &recordingHook{}
	hs := Hooks{rec, panickingHook{}, "not a hook"}
	m := &Message{Topic: "t"}
	hs.BeforeSend(context.Background(), m)
	require.Equal(t, "00-abc", m.Properties["traceparent"])
	require.NotPanics(t, func() { hs.HalfSent(context.Background(), m, errors.New("x"), time.Second) })
	ctx := hs.BeforeHandle(context.Background(), "g", &Received{Message: m})
	hs.Consumed(ctx, "g", &Received{Message: m}, OutcomeHandled, nil, time.Millisecond)
	require.Equal(t, []string{"before-send", "before-handle g", "consumed handled span"}, rec.events)
	var none Hooks
	require.Equal(t, context.Background(), none.BeforeHandle(context.Background(), "g", nil))
}

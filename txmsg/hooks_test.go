package txmsg

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
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

type notAHook struct{}

func (notAHook) OnHalfSnet(context.Context, *Message, error, time.Duration) {}

type ptrHook struct{ n int }

func (h *ptrHook) OnRelayBatch(context.Context, int, int, time.Duration) { h.n++ }

func TestHooksValidateRefusesValuesThatAreNoHook(t *testing.T) {
	t.Parallel()
	require.NoError(t, Hooks{}.Validate())
	require.NoError(t, Hooks{&recordingHook{}, panickingHook{}, &ptrHook{}}.Validate())
	for _, hs := range []Hooks{{notAHook{}}, {ptrHook{}}, {nil}, {&recordingHook{}, "a string"}} {
		err := hs.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig, "%#v", hs)
		_, err = hs.Bind(nil)
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
	err := Hooks{ptrHook{}}.Validate()
	require.ErrorContains(t, err, "txmsg.ptrHook")
	require.ErrorContains(t, err, "implements none of txmsg's hook interfaces")
	// A NewInbox with such a hook is refused.
	_, err = NewInbox(nil, InboxConfig{Hooks: Hooks{notAHook{}}})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

type panicsTwice struct{}

func (panicsTwice) BeforeSend(context.Context, *Message) { panic("send hook broke") }
func (panicsTwice) OnConsumed(context.Context, string, *Received, Outcome, error, time.Duration) {
	panic("consumed hook broke")
}

// TestHookPanicsAreLoggedOncePerHookAndKind: a hook that panics on every
// call is recovered each time, the other hooks still run, and the
// component's logger gets one error line per hook and kind of event, with
// the panic value and the hook's type.
func TestHookPanicsAreLoggedOncePerHookAndKind(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	rec := &recordingHook{}
	hs, err := Hooks{panicsTwice{}, rec, panicsTwice{}}.Bind(log)
	require.NoError(t, err)
	m := &Message{Topic: "t"}
	for range 3 {
		require.NotPanics(t, func() { hs.BeforeSend(context.Background(), m) })
	}
	for range 2 {
		require.NotPanics(t, func() {
			hs.Consumed(context.WithValue(context.Background(), ctxKey{}, "span"), "g", &Received{Message: m}, OutcomeHandled, nil, 0)
		})
	}
	require.Equal(t, []string{"before-send", "before-send", "before-send", "consumed handled span", "consumed handled span"}, rec.events, "the other hooks still run")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4, "two hooks × two kinds:\n%s", buf.String())
	require.Equal(t, 2, strings.Count(buf.String(), `panic="send hook broke"`))
	require.Equal(t, 2, strings.Count(buf.String(), `panic="consumed hook broke"`))
	require.Contains(t, lines[0], "level=ERROR")
	require.Contains(t, lines[0], "hook=txmsg.panicsTwice")
	require.Contains(t, lines[0], "event=BeforeSend")

	// Bound again (a component built from already-bound hooks), the hooks
	// get the new logger and their own record of what was logged.
	var buf2 bytes.Buffer
	hs2, err := hs.Bind(slog.New(slog.NewTextHandler(&buf2, nil)))
	require.NoError(t, err)
	hs2.BeforeSend(context.Background(), m)
	require.Equal(t, 2, strings.Count(buf2.String(), "send hook broke"))
	require.Len(t, strings.Split(strings.TrimSpace(buf.String()), "\n"), 4)
}

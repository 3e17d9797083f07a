package driver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

type ctxKey struct{}

type recordingHook struct{ events []string }

func (h *recordingHook) BeforeSend(_ context.Context, m *txmsg.Message) {
	h.events = append(h.events, "before-send")
	if m.Properties == nil {
		m.Properties = map[string]string{}
	}
	m.Properties["traceparent"] = "00-abc"
}

func (h *recordingHook) BeforeHandle(ctx context.Context, group string, _ *txmsg.Received) context.Context {
	h.events = append(h.events, "before-handle "+group)
	return context.WithValue(ctx, ctxKey{}, "span")
}

func (h *recordingHook) OnConsumed(ctx context.Context, group string, _ *txmsg.Received, o txmsg.Outcome, err error, _ time.Duration) {
	h.events = append(h.events, "consumed "+o.String()+" "+ctx.Value(ctxKey{}).(string))
}

type panickingHook struct{}

func (panickingHook) OnHalfSent(context.Context, *txmsg.Message, error, time.Duration) {
	panic("bad hook")
}

func TestHooksDispatchOnlyImplementedAndSurvivePanics(t *testing.T) {
	t.Parallel()
	rec := &recordingHook{}
	hs := txmsg.Hooks{rec, panickingHook{}, "not a hook"}
	m := &txmsg.Message{Topic: "t"}
	driver.BeforeSend(hs, context.Background(), m)
	require.Equal(t, "00-abc", m.Properties["traceparent"])
	require.NotPanics(t, func() { driver.HalfSent(hs, context.Background(), m, errors.New("x"), time.Second) })
	ctx := driver.BeforeHandle(hs, context.Background(), "g", &txmsg.Received{Message: m})
	driver.Consumed(hs, ctx, "g", &txmsg.Received{Message: m}, txmsg.OutcomeHandled, nil, time.Millisecond)
	require.Equal(t, []string{"before-send", "before-handle g", "consumed handled span"}, rec.events)
	var none txmsg.Hooks
	require.Equal(t, context.Background(), driver.BeforeHandle(none, context.Background(), "g", nil))
}

type panicsTwice struct{}

func (panicsTwice) BeforeSend(context.Context, *txmsg.Message) { panic("send hook broke") }
func (panicsTwice) OnConsumed(context.Context, string, *txmsg.Received, txmsg.Outcome, error, time.Duration) {
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
	hs, err := driver.BindHooks(txmsg.Hooks{panicsTwice{}, rec, panicsTwice{}}, log)
	require.NoError(t, err)
	m := &txmsg.Message{Topic: "t"}
	for range 3 {
		require.NotPanics(t, func() { driver.BeforeSend(hs, context.Background(), m) })
	}
	for range 2 {
		require.NotPanics(t, func() {
			driver.Consumed(hs, context.WithValue(context.Background(), ctxKey{}, "span"), "g", &txmsg.Received{Message: m}, txmsg.OutcomeHandled, nil, 0)
		})
	}
	require.Equal(t, []string{"before-send", "before-send", "before-send", "consumed handled span", "consumed handled span"}, rec.events, "the other hooks still run")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4, "two hooks × two kinds:\n%s", buf.String())
	require.Equal(t, 2, strings.Count(buf.String(), `panic="send hook broke"`))
	require.Equal(t, 2, strings.Count(buf.String(), `panic="consumed hook broke"`))
	require.Contains(t, lines[0], "level=ERROR")
	require.Contains(t, lines[0], "hook=driver_test.panicsTwice")
	require.Contains(t, lines[0], "event=BeforeSend")

	// Bound again (a component built from already-bound hooks), the hooks
	// get the new logger and their own record of what was logged.
	var buf2 bytes.Buffer
	hs2, err := driver.BindHooks(hs, slog.New(slog.NewTextHandler(&buf2, nil)))
	require.NoError(t, err)
	driver.BeforeSend(hs2, context.Background(), m)
	require.Equal(t, 2, strings.Count(buf2.String(), "send hook broke"))
	require.Len(t, strings.Split(strings.TrimSpace(buf.String()), "\n"), 4)
}

// labelHook records what the hooks whose signatures name a component see.
type labelHook struct{ events []string }

func (h *labelHook) OnCheckBack(group, txID, topic string, state txmsg.LocalState, _ error, _ time.Duration) {
	h.events = append(h.events, "checkback "+group+" "+txID+" "+topic+" "+state.String())
}
func (h *labelHook) OnHeld(group, txID, topic string, _ error) {
	h.events = append(h.events, "held "+group+" "+txID+" "+topic)
}
func (h *labelHook) OnRelayBatch(_ context.Context, relay, table string, size, failed int, _ time.Duration) {
	h.events = append(h.events, fmt.Sprintf("batch %s %s %d %d", relay, table, size, failed))
}
func (h *labelHook) OnRelayUnavailable(_ context.Context, relay, table string, rows int, _ error) {
	h.events = append(h.events, fmt.Sprintf("unavailable %s %s %d", relay, table, rows))
}
func (h *labelHook) OnInvalidSend(_ context.Context, msg *txmsg.Message, err error) {
	h.events = append(h.events, "invalid "+msg.Topic+" "+fmt.Sprint(errors.Is(err, txmsg.ErrInvalidMessage)))
}

// TestHooksReceiveComponentNames: the dispatch functions hand each hook
// the group, relay and table they are given, and a hook that implements
// only HookInvalidSend is a valid hook.
func TestHooksReceiveComponentNames(t *testing.T) {
	t.Parallel()
	h := &labelHook{}
	hs, err := driver.BindHooks(txmsg.Hooks{h}, nil)
	require.NoError(t, err)
	ctx := context.Background()
	driver.CheckBack(hs, "pg", "id1", "t", txmsg.StateCommitted, nil, 0)
	driver.Held(hs, "sg", "id2", "t", errors.New("purged"))
	driver.RelayBatch(hs, ctx, "r1", "txmsg_outbox", 3, 1, time.Millisecond)
	driver.RelayUnavailable(hs, ctx, "r1", "txmsg_outbox", 2, txmsg.ErrUnavailable)
	driver.InvalidSend(hs, ctx, &txmsg.Message{Topic: "t"}, fmt.Errorf("%w: no body", txmsg.ErrInvalidMessage))
	require.Equal(t, []string{
		"checkback pg id1 t committed", "held sg id2 t", "batch r1 txmsg_outbox 3 1",
		"unavailable r1 txmsg_outbox 2", "invalid t true",
	}, h.events)

	type onlyInvalid struct{ txmsg.HookInvalidSend }
	require.NoError(t, txmsg.Hooks{onlyInvalid{h}}.Validate())
}

package txmsg

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type recordingHook struct{}

func (*recordingHook) BeforeSend(context.Context, *Message) {}

type panickingHook struct{}

func (panickingHook) OnHalfSent(context.Context, *Message, error, time.Duration) { panic("bad hook") }

type notAHook struct{}

func (notAHook) OnHalfSnet(context.Context, *Message, error, time.Duration) {}

type ptrHook struct{ n int }

func (h *ptrHook) OnRelayBatch(context.Context, string, string, int, int, time.Duration) { h.n++ }

func TestHooksValidateRefusesValuesThatAreNoHook(t *testing.T) {
	t.Parallel()
	require.NoError(t, Hooks{}.Validate())
	require.NoError(t, Hooks{&recordingHook{}, panickingHook{}, &ptrHook{}}.Validate())
	for _, hs := range []Hooks{{notAHook{}}, {ptrHook{}}, {nil}, {&recordingHook{}, "a string"}} {
		err := hs.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig, "%#v", hs)
		_, err = hs.bind(nil)
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
	err := Hooks{ptrHook{}}.Validate()
	require.ErrorContains(t, err, "txmsg.ptrHook")
	require.ErrorContains(t, err, "implements none of txmsg's hook interfaces")
	// A NewInbox with such a hook is refused.
	_, err = NewInbox(nil, InboxConfig{Hooks: Hooks{notAHook{}}})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

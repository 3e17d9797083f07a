package txmsg

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMessageValidate(t *testing.T) {
	t.Parallel()
	ok := func() *Message { return &Message{Topic: "order-created", Body: []byte(`{}`)} }
	cases := []struct {
		name   string
		mutate func(*Message)
		max    int
		want   []error
	}{
		{"valid", func(*Message) {}, 0, nil},
		{"empty topic", func(m *Message) { m.Topic = "" }, 0, []error{ErrInvalidTopic}},
		{"topic with space", func(m *Message) { m.Topic = "order created" }, 0, []error{ErrInvalidTopic}},
		{"topic with dot", func(m *Message) { m.Topic = "order.created" }, 0, []error{ErrInvalidTopic}},
		{"topic too long", func(m *Message) { m.Topic = strings.Repeat("a", 128) }, 0, []error{ErrInvalidTopic}},
		{"topic 127 chars", func(m *Message) { m.Topic = strings.Repeat("a", 127) }, 0, nil},
		{"system topic", func(m *Message) { m.Topic = "RMQ_SYS_TRANS_HALF_TOPIC" }, 0, []error{ErrInvalidTopic}},
		{"default topic", func(m *Message) { m.Topic = "TBW102" }, 0, []error{ErrInvalidTopic}},
		{"retry topic", func(m *Message) { m.Topic = "%RETRY%group" }, 0, []error{ErrInvalidTopic}},
		{"empty body", func(m *Message) { m.Body = nil }, 0, []error{ErrInvalidMessage}},
		{"body at limit", func(m *Message) { m.Body = make([]byte, 10) }, 10, nil},
		{"body over limit", func(m *Message) { m.Body = make([]byte, 11) }, 10, []error{ErrBodyTooLarge}},
		{"body over default", func(m *Message) { m.Body = make([]byte, DefaultMaxBodySize+1) }, 0, []error{ErrBodyTooLarge}},
		{"tag with ||", func(m *Message) { m.Tag = "a||b" }, 0, []error{ErrInvalidMessage}},
		{"key with space", func(m *Message) { m.Keys = []string{"a b"} }, 0, []error{ErrInvalidMessage}},
		{"empty key", func(m *Message) { m.Keys = []string{""} }, 0, []error{ErrInvalidMessage}},
		{"reserved property", func(m *Message) { m.Properties = map[string]string{"KEYS": "x"} }, 0, []error{ErrInvalidMessage}},
		{"txmsg property", func(m *Message) { m.Properties = map[string]string{PropertyID: "x"} }, 0, []error{ErrInvalidMessage}},
		{"separator in property", func(m *Message) { m.Properties = map[string]string{"a": "x\x01y"} }, 0, []error{ErrInvalidMessage}},
		{"user property", func(m *Message) { m.Properties = map[string]string{"trace": "abc"} }, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := ok()
			tc.mutate(m)
			err := m.Validate(tc.max)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidMessage)
			for _, w := range tc.want {
				require.ErrorIs(t, err, w)
			}
		})
	}
	var nilMsg *Message
	require.ErrorIs(t, nilMsg.Validate(0), ErrInvalidMessage)
}

func TestAllKeysPutsIDFirstOnce(t *testing.T) {
	t.Parallel()
	m := &Message{ID: "id1", Keys: []string{"order-7", "id1"}}
	require.Equal(t, []string{"id1", "order-7"}, m.AllKeys())
}

func TestCloneIsDeep(t *testing.T) {
	t.Parallel()
	m := &Message{Topic: "t", Keys: []string{"k"}, Body: []byte("b"), Properties: map[string]string{"p": "v"}}
	c := m.Clone()
	c.Keys[0], c.Body[0], c.Properties["p"] = "x", 'x', "x"
	require.Equal(t, "k", m.Keys[0])
	require.Equal(t, byte('b'), m.Body[0])
	require.Equal(t, "v", m.Properties["p"])
}

func TestPanicErrorUnwraps(t *testing.T) {
	t.Parallel()
	inner := errors.New("inner")
	require.ErrorIs(t, &PanicError{Value: inner}, inner)
	require.Contains(t, (&PanicError{Value: "boom"}).Error(), "boom")
}

// TestDelayValidation: the delay options and Message.Due accept a
// positive delay or a future time up to MaxDelay, and refuse the rest with
// ErrInvalidMessage.
func TestDelayValidation(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	base := func() *Message { return &Message{Topic: "t", Body: []byte("x")} }
	apply := func(o SendOption) *Message { m := base(); o(m); return m }

	for name, m := range map[string]*Message{
		"zero delay":       apply(WithDelay(0)),
		"negative delay":   apply(WithDelay(-time.Second)),
		"zero time":        apply(WithDeliverAt(time.Time{})),
		"negative field":   {Topic: "t", Body: []byte("x"), Delay: -1},
		"both fields":      {Topic: "t", Body: []byte("x"), Delay: time.Second, DeliverAt: now.Add(time.Hour)},
		"reserved due":     {Topic: "t", Body: []byte("x"), Properties: map[string]string{PropertyDeliverAt: "1"}},
		"reserved DELAY":   {Topic: "t", Body: []byte("x"), Properties: map[string]string{"DELAY": "3"}},
		"reserved TIMER_*": {Topic: "t", Body: []byte("x"), Properties: map[string]string{"TIMER_DELIVER_MS": "3"}},
	} {
		require.ErrorIs(t, m.Validate(0), ErrInvalidMessage, name)
	}
	for name, m := range map[string]*Message{
		"too long": apply(WithDelay(MaxDelay + time.Nanosecond)),
		"past":     apply(WithDeliverAt(now.Add(-time.Second))),
		"now":      apply(WithDeliverAt(now)),
		"too far":  apply(WithDeliverAt(now.Add(MaxDelay + time.Millisecond))),
	} {
		require.NoError(t, m.Validate(0), name)
		_, _, err := m.Due(now)
		require.ErrorIs(t, err, ErrInvalidMessage, name)
	}
	due, delayed, err := apply(WithDelay(MaxDelay)).Due(now)
	require.NoError(t, err)
	require.True(t, delayed)
	require.Equal(t, now.Add(MaxDelay), due)
	due, delayed, err = apply(WithDeliverAt(now.Add(time.Minute))).Due(now)
	require.NoError(t, err)
	require.True(t, delayed)
	require.Equal(t, now.Add(time.Minute), due)
	_, delayed, err = base().Due(now)
	require.NoError(t, err)
	require.False(t, delayed)
	// The later option wins.
	m := apply(WithDeliverAt(now.Add(time.Hour)))
	WithDelay(time.Minute)(m)
	require.True(t, m.DeliverAt.IsZero())
	require.NoError(t, m.Validate(0))
}

// TestDeliverAtProperty: the due time travels in Unix milliseconds,
// rounded up, never early.
func TestDeliverAtProperty(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123).Add(400 * time.Microsecond)
	v := FormatDeliverAt(at)
	require.Equal(t, "1700000000124", v)
	got, ok := ParseDeliverAt(v)
	require.True(t, ok)
	require.False(t, got.Before(at))
	require.Equal(t, "1700000000123", FormatDeliverAt(time.UnixMilli(1_700_000_000_123)))
	for _, bad := range []string{"", "x", "-5", "0"} {
		_, ok := ParseDeliverAt(bad)
		require.False(t, ok, bad)
	}
}

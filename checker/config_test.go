package checker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/txmsg"
)

// WithDefaults then Validate accepts a minimal config; Validate alone
// refuses the zero config and names the field.
func TestConfigDefaultsThenValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.WithDefaults().Validate())
	err := Config{}.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Table")
	err = Config{Table: DefaultTable}.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "ResolveTimeout")

	d := Config{Table: "orders_barrier"}.WithDefaults()
	require.Equal(t, "orders_barrier", d.Table, "a field set is kept")
	require.Equal(t, DefaultResolveTimeout, d.ResolveTimeout)
	require.Equal(t, DefaultCheckWindow, d.CheckWindow)
	require.Equal(t, d, d.WithDefaults(), "WithDefaults is idempotent")
	d.CheckWindow = -1
	err = d.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "CheckWindow")
}

package outbox

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
	require.ErrorContains(t, err, "MaxBodySize")

	d := Config{Buckets: 4}.WithDefaults()
	require.Equal(t, 4, d.Buckets, "a field set is kept")
	require.Equal(t, DefaultTable, d.Table)
	require.Equal(t, d, d.WithDefaults(), "WithDefaults is idempotent")
}

func TestRelayConfigDefaultsThenValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, RelayConfig{}.WithDefaults().Validate())
	err := RelayConfig{}.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Name")
	err = RelayConfig{Name: "r"}.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "BatchSize")

	d := RelayConfig{Name: "r", MaxAttempts: -1, Retention: -1}.WithDefaults()
	require.Equal(t, "r", d.Name)
	require.Equal(t, -1, d.MaxAttempts, "negative means forever and is kept")
	require.Equal(t, DefaultBatchSize, d.BatchSize)
	require.Equal(t, handOverTTLs*DefaultLeaseTTL, d.HandOverAfter)
	require.Equal(t, d, d.WithDefaults(), "WithDefaults is idempotent")
	require.NoError(t, d.Validate())

	d.MaxWaitBackoff = 2 * d.MaxBackoff
	err = d.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "MaxWaitBackoff")
}

package txprom_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/txprom"
	"github.com/txmsg/txmsg/txmsg"
)

// TestConfigWithDefaultsThenValidate: the zero config, defaulted, is
// valid; Validate names the field of what it refuses.
func TestConfigWithDefaultsThenValidate(t *testing.T) {
	require.NoError(t, txprom.Config{}.WithDefaults().Validate())
	require.NoError(t, txprom.Config{ConstLabels: prometheus.Labels{"service": "orders"}}.WithDefaults().Validate())
	for name, c := range map[string]struct {
		cfg  txprom.Config
		want string
	}{
		"not defaulted":       {txprom.Config{}, "Buckets is empty"},
		"bad label name":      {txprom.Config{ConstLabels: prometheus.Labels{"a-b": "x"}}, "ConstLabels"},
		"a label of txmsg's":  {txprom.Config{ConstLabels: prometheus.Labels{"topic": "x"}}, "ConstLabels"},
		"buckets not rising":  {txprom.Config{Buckets: []float64{1, 1}}, "Buckets must increase"},
		"batch buckets empty": {txprom.Config{Buckets: []float64{1}, BatchSizeBuckets: []float64{}}, "BatchSizeBuckets is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := c.cfg
			if name != "not defaulted" && name != "batch buckets empty" {
				cfg = cfg.WithDefaults()
			}
			err := cfg.Validate()
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
		})
	}
}

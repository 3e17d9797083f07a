package txrmq_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/txmsg"
)

// validator is what every txrmq config has: WithDefaults (on the concrete
// type, returning it) and Validate.
type validator interface{ Validate() error }

// TestConfigWithDefaultsThenValidate: each config's WithDefaults fills
// what Validate needs, so the minimal valid config (name servers, group
// and what the component requires) passes both; Validate alone refuses a
// zero config, naming the field, and a minimal one not defaulted, naming
// a field WithDefaults fills.
func TestConfigWithDefaultsThenValidate(t *testing.T) {
	t.Parallel()
	conn := txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}
	cases := []struct {
		name      string
		minimal   validator // not defaulted
		defaulted validator // minimal.WithDefaults()
		zero      validator
		unfilled  string // a field Validate names on minimal
	}{
		{"Conn", conn, conn.WithDefaults(), txrmq.Conn{}, "NameServerTimeout"},
		{
			"TransactionalConfig",
			txrmq.TransactionalConfig{Conn: conn, Group: "g"},
			txrmq.TransactionalConfig{Conn: conn, Group: "g"}.WithDefaults(),
			txrmq.TransactionalConfig{}, "NameServerTimeout",
		},
		{
			"PublisherConfig",
			txrmq.PublisherConfig{Conn: conn.WithDefaults(), Group: "g"},
			txrmq.PublisherConfig{Conn: conn, Group: "g"}.WithDefaults(),
			txrmq.PublisherConfig{}, "SendTimeout",
		},
		{
			"ConsumerConfig",
			txrmq.ConsumerConfig{Conn: conn.WithDefaults(), Group: "g"},
			txrmq.ConsumerConfig{Conn: conn, Group: "g"}.WithDefaults(),
			txrmq.ConsumerConfig{}, "Concurrency",
		},
		{
			"OrderedConsumerConfig",
			txrmq.OrderedConsumerConfig{Conn: conn.WithDefaults(), Group: "g"},
			txrmq.OrderedConsumerConfig{Conn: conn, Group: "g"}.WithDefaults(),
			txrmq.OrderedConsumerConfig{}, "Concurrency",
		},
		{
			"SweeperConfig",
			txrmq.SweeperConfig{Conn: conn.WithDefaults(), Group: "g", ProducerGroups: []string{"p"}},
			txrmq.SweeperConfig{Conn: conn, Group: "g", ProducerGroups: []string{"p"}}.WithDefaults(),
			txrmq.SweeperConfig{}, "HoldFor",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.defaulted.Validate())

			err := tc.zero.Validate()
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
			require.ErrorContains(t, err, "NameServers")

			err = tc.minimal.Validate()
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.unfilled)
		})
	}
}

// TestConfigWithDefaultsKeepsSetFields: WithDefaults fills only zero
// fields.
func TestConfigWithDefaultsKeepsSetFields(t *testing.T) {
	t.Parallel()
	c := txrmq.ConsumerConfig{Conn: txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}, Group: "g", Concurrency: 3}.WithDefaults()
	require.Equal(t, 3, c.Concurrency)
	require.Equal(t, txrmq.DefaultMaxReconsumeTimes, c.MaxReconsumeTimes)
	require.Equal(t, txrmq.DefaultNameServerTimeout, c.NameServerTimeout)
	p := txrmq.PublisherConfig{MaxBatch: 1}.WithDefaults()
	require.Equal(t, 1, p.MaxBatch)
	require.Equal(t, txrmq.DefaultSendTimeout, p.SendTimeout)
	o := txrmq.OrderedConsumerConfig{MinBackoff: 2 * time.Minute}.WithDefaults()
	require.Equal(t, 2*time.Minute, o.MaxBackoff, "MaxBackoff defaults to MinBackoff when that is longer")
}

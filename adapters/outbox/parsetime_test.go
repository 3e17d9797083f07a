package outbox

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// New refuses a handle whose DSN lacks parseTime=true, whether
// gorm knows the DSN or was given a *sql.DB; one with it is taken.
func TestNewRefusesDSNWithoutParseTime(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	for name, db := range testbed.WithoutParseTime(t, dsn) {
		_, err := New(db, Config{})
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, name)
		require.ErrorContains(t, err, "parseTime=true", name)
	}
	db := testbed.OverConn(t, dsn)
	ob, err := New(db, Config{})
	require.NoError(t, err)
	_, err = NewRelay(ob, newMemPublisher(), RelayConfig{})
	require.NoError(t, err)
}

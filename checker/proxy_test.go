package checker_test

import (
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
)

// proxiedDB opens dsn through a proxy the test can cut.
func proxiedDB(t *testing.T, dsn string) (*testbed.Proxy, *gorm.DB) {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	p := testbed.NewProxy(t, cfg.Addr)
	cfg.Addr = p.Addr()
	cfg.Timeout = 2e9
	cfg.ReadTimeout = 5e9
	cfg.WriteTimeout = 5e9
	db, err := testbed.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	})
	return p, db
}

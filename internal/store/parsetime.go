package store

import (
	"context"
	"errors"
	"time"

	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// ErrNoParseTime means the handle's MySQL connections return DATETIME
// values as bytes: its DSN lacks parseTime=true. txmsg's tables hold
// DATETIME columns that it reads into time.Time, so such a handle fails
// later, on the first read of one (a relay's lease round, a purge horizon,
// an inspection), with a Scan error.
var ErrNoParseTime = errors.New("the MySQL DSN lacks parseTime=true, which txmsg needs to read its tables' DATETIME columns into time.Time: add parseTime=true to the DSN (…/dbname?parseTime=true)")

// ParseTimeProbeTimeout bounds the query CheckParseTime sends when the
// handle's DSN is not known.
const ParseTimeProbeTimeout = 5 * time.Second

// CheckParseTime returns ErrNoParseTime when db's connections do not parse
// DATETIME values into time.Time. A handle opened through gorm's MySQL
// dialector from a DSN (mysql.Open, or mysql.New with DSN or DSNConfig) is
// checked from its parsed DSN, without a query. A handle over a connection
// pool of the caller's (mysql.New with Conn, or another dialector) is
// checked with one SELECT NOW(), bounded by ParseTimeProbeTimeout: the
// driver returns it as time.Time with parseTime and as bytes without. When
// that query fails (the database does not answer yet) nothing can be told
// and CheckParseTime returns nil. A gorm.DB that was never opened (no
// Config or connection pool) is not checked.
func CheckParseTime(db *gorm.DB) error {
	if db == nil || db.Config == nil {
		return nil
	}
	if d, ok := db.Dialector.(*gmysql.Dialector); ok && d.Config != nil && d.Conn == nil && d.DSNConfig != nil {
		if d.DSNConfig.ParseTime {
			return nil
		}
		return ErrNoParseTime
	}
	pool := db.ConnPool
	if db.Statement != nil && db.Statement.ConnPool != nil {
		pool = db.Statement.ConnPool
	}
	if pool == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ParseTimeProbeTimeout)
	defer cancel()
	var now any
	if err := pool.QueryRowContext(ctx, "SELECT NOW()").Scan(&now); err != nil {
		return nil
	}
	if _, ok := now.(time.Time); ok {
		return nil
	}
	return ErrNoParseTime
}

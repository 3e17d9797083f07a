package testbed

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Split is a gorm handle with read/write splitting, as gorm's dbresolver
// plugin and ProxySQL's usual query rules do it: a statement outside a
// transaction that begins with SELECT and does not end with FOR UPDATE
// goes to the replica; every other statement, and every transaction, goes
// to the primary.
type Split struct {
	*gorm.DB
	// ToReplica counts the statements sent to the replica.
	ToReplica atomic.Int64
}

// ReadWriteSplit returns a [Split] over primary and replica, both opened
// from DSNs of the same server or of two; dsn (the primary's) gives the
// handle its driver settings (time zone, parseTime), as gorm.Open(dsn)
// with dbresolver would have them.
func ReadWriteSplit(t testing.TB, dsn string, primary, replica *sql.DB) *Split {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("read/write split: %v", err)
	}
	s := &Split{}
	pool := &splitPool{primary: primary, replica: replica, toReplica: &s.ToReplica}
	db, err := gorm.Open(gmysql.New(gmysql.Config{Conn: pool, DSNConfig: cfg, SkipInitializeWithVersion: true}),
		&gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("read/write split: %v", err)
	}
	s.DB = db
	return s
}

type splitPool struct {
	primary, replica *sql.DB
	toReplica        *atomic.Int64
}

// read reports whether query goes to the replica.
func (p *splitPool) read(query string) bool {
	q := strings.ToUpper(strings.TrimSpace(query))
	if strings.HasPrefix(q, "SELECT") && !strings.HasSuffix(q, "FOR UPDATE") {
		p.toReplica.Add(1)
		return true
	}
	return false
}

func (p *splitPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if p.read(query) {
		return p.replica.PrepareContext(ctx, query)
	}
	return p.primary.PrepareContext(ctx, query)
}

func (p *splitPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return p.primary.ExecContext(ctx, query, args...)
}

func (p *splitPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if p.read(query) {
		return p.replica.QueryContext(ctx, query, args...)
	}
	return p.primary.QueryContext(ctx, query, args...)
}

func (p *splitPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if p.read(query) {
		return p.replica.QueryRowContext(ctx, query, args...)
	}
	return p.primary.QueryRowContext(ctx, query, args...)
}

// BeginTx starts every transaction on the primary.
func (p *splitPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	return p.primary.BeginTx(ctx, opts)
}

// GetDBConn is what gorm.DB.DB returns: the primary.
func (p *splitPool) GetDBConn() (*sql.DB, error) { return p.primary, nil }

// ProxiedSplit returns a [Split] on the database of dsn whose primary is
// reached through a [Proxy] the test can cut, and whose replica is the
// same database reached directly: a primary that goes down while a
// replica answers.
func ProxiedSplit(t testing.TB, dsn string) (*Proxy, *Split) {
	t.Helper()
	proxy, primary := ProxiedDB(t, dsn)
	replica, err := Open(dsn)
	if err != nil {
		t.Fatalf("replica: %v", err)
	}
	ps, err := primary.DB()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := replica.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	return proxy, ReadWriteSplit(t, dsn, ps, rs)
}

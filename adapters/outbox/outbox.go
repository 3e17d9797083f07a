package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// Outbox writes messages into the outbox table inside local transactions.
// It implements [txmsg.Transactor]. It is safe for concurrent use.
type Outbox struct {
	db  *gorm.DB // as given: the local transactions
	q   *gorm.DB // db for the outbox's own statements (store.Quiet)
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	wakers map[chan struct{}]struct{}
}

var _ txmsg.Transactor = (*Outbox)(nil)

// New returns an Outbox writing to cfg.Table through db. Call
// [Outbox.Migrate] (or apply outbox.sql) before the first Transact. db's
// MySQL DSN must carry parseTime=true: without it New returns an error
// wrapping [txmsg.ErrInvalidConfig] that says so. A db over a *sql.DB of
// the caller's (gorm's mysql.New with Conn) is checked with one query.
// cfg goes through [Config.WithDefaults] and [Config.Validate].
func New(db *gorm.DB, cfg Config) (*Outbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: outbox: db is nil", txmsg.ErrInvalidConfig)
	}
	if err := store.CheckParseTime(db); err != nil {
		return nil, fmt.Errorf("%w: outbox: %w", txmsg.ErrInvalidConfig, err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hooks, err := driver.BindHooks(cfg.Hooks, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("%w: outbox: Hooks: %w", txmsg.ErrInvalidConfig, err)
	}
	cfg.Hooks = hooks
	return &Outbox{
		db:     db,
		q:      store.Quiet(db),
		cfg:    cfg,
		log:    cfg.Logger.With("component", "txmsg.outbox", "table", cfg.Table),
		wakers: map[chan struct{}]struct{}{},
	}, nil
}

// Table returns the outbox table's name.
func (o *Outbox) Table() string { return o.cfg.Table }

// Migrate creates or updates the outbox table and the relays' lease and
// relay tables with gorm's AutoMigrate. outbox.sql holds the same tables
// as DDL for migration tools. Tables of earlier releases get what they
// lack: the relay table, the index idx_outbox_bucket_due.
func (o *Outbox) Migrate(ctx context.Context) error {
	return migrate(ctx, o.q, o.cfg.Table, o.log)
}

func migrate(ctx context.Context, db *gorm.DB, table string, log *slog.Logger) error {
	for _, t := range []struct {
		name  string
		model any
	}{{table, &Row{}}, {table + leaseSuffix, &Lease{}}, {table + relaySuffix, &Member{}}} {
		converted, err := store.Migrate(ctx, db, t.name, t.model)
		if len(converted) > 0 && log != nil {
			log.Warn("converted identifier columns to binary: IDs now compare byte for byte", "migrated_table", t.name, "columns", converted)
		}
		if err != nil {
			return fmt.Errorf("outbox: migrate %s: %w", t.name, err)
		}
	}
	return nil
}

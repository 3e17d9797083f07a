// Package checker owns the barrier table that answers RocketMQ's
// transaction check-backs from the database, deterministically.
//
// Every transactional send inserts a barrier row (tx_id, 'committed') as the
// first statement of its local transaction ([Checker.Begin]). A check-back
// calls [Checker.Resolve], which reads the row and, only when there is
// none, tries to insert (tx_id, 'rolled_back') and reads it back:
//
//   - the local transaction committed: the insert is ignored, the row says
//     committed, the answer is COMMIT;
//   - it rolled back or never started: the insert wins, the answer is
//     ROLLBACK, and a local transaction that starts later fails in Begin
//     with txmsg.ErrRolledBackByCheck;
//   - it is still running: its uncommitted row holds the key, the insert
//     waits for it and then sees the outcome;
//   - the database fails or times out: the answer is UNKNOWN and the broker
//     asks again. An error never becomes COMMIT or ROLLBACK.
package checker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
)

// DefaultTable is the barrier table's default name.
const DefaultTable = "txmsg_barrier"

// Barrier states stored in the state column.
const (
	StateCommitted  = "committed"
	StateRolledBack = "rolled_back"
)

// DefaultCheckWindow covers the longest check window of RocketMQ's default
// broker settings (4.x: transactionTimeOut 6 s + 15 checks × 60 s), with
// margin. Barrier rows younger than this are never purged.
const DefaultCheckWindow = 30 * time.Minute

// DefaultResolveTimeout is Config.ResolveTimeout's default.
const DefaultResolveTimeout = 3 * time.Second

// Barrier is one row of the barrier table. tx_id is VARBINARY so that IDs
// compare byte for byte whatever the database's collation: "Order-1" and
// "order-1" are two transactions.
type Barrier struct {
	TxID      string    `gorm:"column:tx_id;primaryKey;type:varbinary(255);size:255;not null"`
	State     string    `gorm:"size:16;not null"`
	CreatedAt time.Time `gorm:"precision:6;not null;index:idx_txmsg_barrier_created_at"`
}

// Config configures a [Checker].
type Config struct {
	// Table is the barrier table. Default [DefaultTable].
	Table string
	// ResolveTimeout bounds one check-back answer. The client answers
	// check-backs one at a time, so a slow answer delays all others.
	// Default [DefaultResolveTimeout] (3 s).
	ResolveTimeout time.Duration
	// CheckWindow is the broker's whole check window
	// (transactionTimeOut + transactionCheckMax × transactionCheckInterval).
	// Purge refuses cutoffs younger than this. Default [DefaultCheckWindow].
	CheckWindow time.Duration
	// Logger receives the checker's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Checker reads and writes the barrier table.
type Checker struct {
	db     *gorm.DB
	cfg    Config
	logger *slog.Logger
}

// New returns a Checker over db. db must reach the same database as the
// local transactions, ideally through the same pool.
func New(db *gorm.DB, cfg Config) (*Checker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: checker: db is nil", txmsg.ErrInvalidConfig)
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if !store.ValidIdent(cfg.Table) {
		return nil, fmt.Errorf("%w: checker: table name %q is not a plain SQL identifier", txmsg.ErrInvalidConfig, cfg.Table)
	}
	if cfg.ResolveTimeout < 0 || cfg.CheckWindow < 0 {
		return nil, fmt.Errorf("%w: checker: durations must not be negative", txmsg.ErrInvalidConfig)
	}
	if cfg.ResolveTimeout == 0 {
		cfg.ResolveTimeout = DefaultResolveTimeout
	}
	if cfg.CheckWindow == 0 {
		cfg.CheckWindow = DefaultCheckWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Checker{db: db, cfg: cfg, logger: cfg.Logger.With("component", "txmsg.checker", "table", cfg.Table)}, nil
}

// Table returns the barrier table name.
func (c *Checker) Table() string { return c.cfg.Table }

// Migrate creates or updates the barrier table. On a table created before
// tx_id was binary it converts the column first (one ALTER TABLE, which
// rebuilds the table); see docs/reliability.md.
func (c *Checker) Migrate(ctx context.Context) error {
	converted, err := store.Migrate(ctx, c.db, c.cfg.Table, &Barrier{})
	if len(converted) > 0 {
		c.logger.Warn("converted identifier columns to binary: IDs now compare byte for byte", "columns", converted)
	}
	if err != nil {
		return fmt.Errorf("checker: migrate %s: %w", c.cfg.Table, err)
	}
	return nil
}

// Begin records, inside the local transaction tx, that txID is committing.
// Call it first in the transaction, before any business write, so a
// concurrent check-back waits for the outcome. When a check-back already
// answered ROLLBACK for txID it returns [txmsg.ErrRolledBackByCheck]; when
// txID was committed before it returns [txmsg.ErrDuplicateID]. Either way
// the caller must roll tx back.
func (c *Checker) Begin(ctx context.Context, tx *gorm.DB, txID string) error {
	row := Barrier{TxID: txID, State: StateCommitted, CreatedAt: time.Now().UTC()}
	err := tx.WithContext(ctx).Table(c.cfg.Table).Create(&row).Error
	if err == nil {
		return nil
	}
	if !store.IsDuplicate(tx, err) {
		return fmt.Errorf("checker: insert barrier %s: %w", txID, err)
	}
	// The row is someone else's committed row; read it outside tx, whose
	// statement failed.
	state, serr := c.state(ctx, txID)
	switch {
	case serr != nil:
		return fmt.Errorf("%w (barrier %s exists; reading its state failed: %v)", txmsg.ErrRolledBackByCheck, txID, serr)
	case state == StateCommitted:
		return fmt.Errorf("%w: %s", txmsg.ErrDuplicateID, txID)
	default:
		return fmt.Errorf("%w: %s", txmsg.ErrRolledBackByCheck, txID)
	}
}

// Resolve answers a check-back for txID: [txmsg.StateCommitted] or
// [txmsg.StateRolledBack]. On a database error or timeout it returns
// [txmsg.StateUnknown] and the error; it never guesses.
//
// Resolve writes a rolled_back row for a txID it has never seen, so that a
// local transaction that starts after this answer cannot commit.
func (c *Checker) Resolve(ctx context.Context, txID string) (txmsg.LocalState, error) {
	if txID == "" {
		return txmsg.StateUnknown, errors.New("checker: empty tx ID")
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ResolveTimeout)
	defer cancel()
	// A barrier row never changes once committed, so a row that is already
	// visible is the answer; only a missing one needs the insert, which
	// waits on a local transaction still holding the key.
	if state, err := c.state(ctx, txID); err == nil {
		return toLocalState(txID, state)
	} else if !errors.Is(err, gorm.ErrRecordNotFound) {
		return txmsg.StateUnknown, fmt.Errorf("checker: resolve %s: %w", txID, err)
	}
	row := Barrier{TxID: txID, State: StateRolledBack, CreatedAt: time.Now().UTC()}
	res := c.db.WithContext(ctx).Session(&gorm.Session{SkipDefaultTransaction: true}).
		Table(c.cfg.Table).Clauses(clause.OnConflict{DoNothing: true}).Create(&row)
	if res.Error != nil {
		return txmsg.StateUnknown, fmt.Errorf("checker: resolve %s: %w", txID, res.Error)
	}
	if res.RowsAffected == 1 {
		// The local transaction never committed: the producer died after
		// the half send, or its END_TRANSACTION ROLLBACK was lost.
		c.logger.Info("no committed barrier row; recorded rolled_back", "txmsg_id", txID, "state", StateRolledBack)
	}
	state, err := c.state(ctx, txID)
	if err != nil {
		return txmsg.StateUnknown, fmt.Errorf("checker: resolve %s: %w", txID, err)
	}
	return toLocalState(txID, state)
}

func toLocalState(txID, state string) (txmsg.LocalState, error) {
	switch state {
	case StateCommitted:
		return txmsg.StateCommitted, nil
	case StateRolledBack:
		return txmsg.StateRolledBack, nil
	default:
		return txmsg.StateUnknown, fmt.Errorf("checker: resolve %s: unexpected state %q", txID, state)
	}
}

// Lookup reads txID's barrier state without writing: "committed",
// "rolled_back", or "" when there is no row.
func (c *Checker) Lookup(ctx context.Context, txID string) (string, error) {
	state, err := c.state(ctx, txID)
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "", nil
	}
	return state, err
}

func (c *Checker) state(ctx context.Context, txID string) (string, error) {
	var row Barrier
	err := c.db.WithContext(ctx).Table(c.cfg.Table).
		Where(clause.Eq{Column: clause.Column{Name: "tx_id"}, Value: txID}).
		Take(&row).Error
	if err != nil {
		return "", err
	}
	return row.State, nil
}

// ErrCutoffInWindow means Purge was asked to delete barrier rows the broker
// may still ask about.
var ErrCutoffInWindow = errors.New("checker: purge cutoff is inside the broker's check window")

// Purge deletes barrier rows older than olderThan, in batches of batch rows
// (0 means [txmsg.DefaultPurgeBatch]). It refuses an olderThan shorter than the configured
// CheckWindow: a purged row would let a late check-back answer ROLLBACK for
// a committed transaction.
func (c *Checker) Purge(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if olderThan < c.cfg.CheckWindow {
		return 0, fmt.Errorf("%w: %s < %s", ErrCutoffInWindow, olderThan, c.cfg.CheckWindow)
	}
	n, err := store.PurgeBefore(ctx, c.db, c.cfg.Table, "tx_id", "created_at", time.Now().UTC().Add(-olderThan), batch)
	if n > 0 {
		c.logger.Debug("purged barrier rows", "rows", n, "older_than", olderThan)
	}
	if err != nil {
		return n, fmt.Errorf("checker: %w", err)
	}
	return n, nil
}

// Counts returns the number of barrier rows by state.
func (c *Checker) Counts(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		State string
		N     int64
	}
	err := c.db.WithContext(ctx).Table(c.cfg.Table).Select("state, COUNT(*) AS n").Group("state").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("checker: count %s: %w", c.cfg.Table, err)
	}
	out := map[string]int64{StateCommitted: 0, StateRolledBack: 0}
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, nil
}

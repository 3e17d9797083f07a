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
//
// Resolve reads with a locking read (LOCK IN SHARE MODE), which sees only
// committed rows and waits for a transaction still holding the key, so its
// answer does not depend on the session's or the server's isolation level:
// at READ UNCOMMITTED a plain read would see another transaction's
// uncommitted row and answer COMMIT for a transaction that may still roll
// back.
//
// [Checker.Purge] records how far it has purged (the purge horizon, in the
// table named Table+"_horizon"). Once rows have been purged, a missing row
// proves nothing for a transaction that began before the horizon, and
// Resolve answers UNKNOWN with [ErrBeyondPurgeHorizon] instead of ROLLBACK.
// A transaction's beginning is known from its UUIDv7 ID ([txmsg.IDTime]) or
// from the half message's born time ([Checker.ResolveSince]); a
// transaction with neither, after any purge, is treated as beyond the
// horizon.
package checker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-sql-driver/mysql"
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
	// Topic is the message's topic, written with [Config.KeepMessages];
	// NULL otherwise.
	Topic *string `gorm:"type:varbinary(127);size:127"`
	// Message is the rest of the message (tag, keys, sharding key,
	// properties and body), written with [Config.KeepMessages]; NULL
	// otherwise. See [Checker.Committed].
	Message []byte `gorm:"type:longblob"`
}

// HorizonMargin is how much younger than the purge horizon a transaction
// must be for a missing barrier row to mean ROLLBACK. It covers the clock
// difference between the host that minted a caller-chosen UUIDv7 ID and
// the producer that wrote the barrier row.
const HorizonMargin = time.Minute

// horizonRow is the one row of the horizon table: barrier rows created
// before PurgedBefore may have been deleted.
type horizonRow struct {
	ID           int       `gorm:"primaryKey;autoIncrement:false"`
	PurgedBefore time.Time `gorm:"precision:6;not null"`
}

// Config configures a [Checker].
type Config struct {
	// Table is the barrier table. Default [DefaultTable].
	Table string
	// ResolveTimeout bounds one check-back answer. The client answers
	// check-backs one at a time, so a slow answer delays all others. It
	// also bounds Begin's read of a barrier row that already exists (a
	// duplicate ID). Default [DefaultResolveTimeout] (3 s).
	ResolveTimeout time.Duration
	// CheckWindow is the broker's whole check window
	// (transactionTimeOut + transactionCheckMax × transactionCheckInterval).
	// Purge refuses cutoffs younger than this. Default [DefaultCheckWindow].
	CheckWindow time.Duration
	// KeepMessages makes [Checker.BeginMessage] write the message (its
	// topic, tag, keys, properties and body) into the barrier row, so that
	// a reconciler can publish it again if the broker loses it
	// ([Checker.Committed]). It costs the body's bytes in the same INSERT
	// (no extra round trip) and keeps them until Purge deletes the row.
	// Default false: the row holds the ID, the state and the time.
	KeepMessages bool
	// Logger receives the checker's logs; nil means slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with its zero fields set to their defaults:
// Table [DefaultTable], ResolveTimeout [DefaultResolveTimeout],
// CheckWindow [DefaultCheckWindow], Logger slog.Default(). It checks
// nothing; see [Config.Validate].
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.ResolveTimeout == 0 {
		c.ResolveTimeout = DefaultResolveTimeout
	}
	if c.CheckWindow == 0 {
		c.CheckWindow = DefaultCheckWindow
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks a config that went through [Config.WithDefaults]: a
// zero field that has a default is refused. Its errors wrap
// [txmsg.ErrInvalidConfig] and name the field.
func (c Config) Validate() error {
	if !store.ValidIdent(c.Table) || !store.ValidIdent(c.Table+horizonSuffix) {
		return fmt.Errorf("%w: checker: Table %q is not a plain SQL identifier of at most %d characters", txmsg.ErrInvalidConfig, c.Table, 64-len(horizonSuffix))
	}
	if c.ResolveTimeout <= 0 {
		return fmt.Errorf("%w: checker: ResolveTimeout %v must be positive", txmsg.ErrInvalidConfig, c.ResolveTimeout)
	}
	if c.CheckWindow <= 0 {
		return fmt.Errorf("%w: checker: CheckWindow %v must be positive", txmsg.ErrInvalidConfig, c.CheckWindow)
	}
	if c.Logger == nil {
		return fmt.Errorf("%w: checker: Logger is nil; call WithDefaults first", txmsg.ErrInvalidConfig)
	}
	return nil
}

// Checker reads and writes the barrier table.
type Checker struct {
	db     *gorm.DB
	q      *gorm.DB // db for the checker's own statements (store.Quiet)
	cfg    Config
	logger *slog.Logger
}

// New returns a Checker over db. db must reach the same database as the
// local transactions, ideally through the same pool, and its MySQL DSN
// must carry parseTime=true: without it New returns an error wrapping
// [txmsg.ErrInvalidConfig] that says so. A db over a *sql.DB of the
// caller's (gorm's mysql.New with Conn) is checked with one query. cfg
// goes through [Config.WithDefaults] and [Config.Validate].
func New(db *gorm.DB, cfg Config) (*Checker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: checker: db is nil", txmsg.ErrInvalidConfig)
	}
	if err := store.CheckParseTime(db); err != nil {
		return nil, fmt.Errorf("%w: checker: %w", txmsg.ErrInvalidConfig, err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Checker{db: db, q: store.Quiet(db), cfg: cfg, logger: cfg.Logger.With("component", "txmsg.checker", "table", cfg.Table)}, nil
}

const horizonSuffix = "_horizon"

// DB returns the handle the checker reads and writes through.
func (c *Checker) DB() *gorm.DB { return c.db }

// Table returns the barrier table name.
func (c *Checker) Table() string { return c.cfg.Table }

// CheckWindow returns the broker's whole check window the checker was
// configured with ([Config.CheckWindow], after defaults): no check-back
// comes for a half message older than this, and Purge keeps younger rows.
func (c *Checker) CheckWindow() time.Duration { return c.cfg.CheckWindow }

// HorizonTable returns the name of the table where Purge records its
// horizon: the barrier table's name + "_horizon".
func (c *Checker) HorizonTable() string { return c.cfg.Table + horizonSuffix }

// Migrate creates or updates the barrier table and its horizon table. On
// a barrier table created before tx_id was binary it converts the column
// first (one ALTER TABLE, which rebuilds the table); see
// docs/reliability.md.
func (c *Checker) Migrate(ctx context.Context) error {
	converted, err := store.Migrate(ctx, c.q, c.cfg.Table, &Barrier{})
	if len(converted) > 0 {
		c.logger.Warn("converted identifier columns to binary: IDs now compare byte for byte", "columns", converted)
	}
	if err != nil {
		return fmt.Errorf("checker: migrate %s: %w", c.cfg.Table, err)
	}
	if _, err := store.Migrate(ctx, c.q, c.HorizonTable(), &horizonRow{}); err != nil {
		return fmt.Errorf("checker: migrate %s: %w", c.HorizonTable(), err)
	}
	return nil
}

// ErrOtherDatabase means two handles that must reach one database do not.
var ErrOtherDatabase = errors.New("checker: the local transactions and the checker use different databases")

// CheckSameDatabase verifies that db reaches the database (server and
// schema) of the checker. The barrier row is written by the local
// transaction on db and read by the checker; on two databases every
// check-back would find no row and answer ROLLBACK for committed work.
func (c *Checker) CheckSameDatabase(ctx context.Context, db *gorm.DB) error {
	mine, err := databaseOf(ctx, c.q)
	if err != nil {
		return fmt.Errorf("checker: identify the checker's database: %w", err)
	}
	theirs, err := databaseOf(ctx, db)
	if err != nil {
		return fmt.Errorf("checker: identify the local transactions' database: %w", err)
	}
	if mine.schema == "" {
		return fmt.Errorf("%w: the checker's connection has no current database; name one in the DSN", ErrOtherDatabase)
	}
	if mine != theirs {
		return fmt.Errorf("%w: local transactions run on %s, the checker reads %s", ErrOtherDatabase, theirs, mine)
	}
	return nil
}

type dbIdentity struct {
	schema, host string
	port         int64
}

func (d dbIdentity) String() string {
	schema := d.schema
	if schema == "" {
		schema = "(no database)"
	}
	return fmt.Sprintf("%q on %s:%d", schema, d.host, d.port)
}

func databaseOf(ctx context.Context, db *gorm.DB) (dbIdentity, error) {
	var row struct {
		Schema *string
		Host   string
		Port   int64
	}
	err := db.WithContext(ctx).Raw("SELECT DATABASE() AS `schema`, @@hostname AS host, @@port AS port").Scan(&row).Error
	if err != nil {
		return dbIdentity{}, err
	}
	id := dbIdentity{host: row.Host, port: row.Port}
	if row.Schema != nil {
		id.schema = *row.Schema
	}
	return id, nil
}

// Begin records, inside the local transaction tx, that txID is committing.
// Call it first in the transaction, before any business write, so a
// concurrent check-back waits for the outcome. When a check-back already
// answered ROLLBACK for txID it returns [txmsg.ErrRolledBackByCheck]; when
// txID was committed before it returns [txmsg.ErrDuplicateID]. It tells the
// two apart by reading the existing row in tx, bounded by
// Config.ResolveTimeout; when that read fails it returns
// [txmsg.ErrOutcomeUnknown]: the ID may have committed, so retrying with a
// new message may apply the business operation twice. Whatever the error,
// the caller must roll tx back.
func (c *Checker) Begin(ctx context.Context, tx *gorm.DB, txID string) error {
	return c.begin(ctx, tx, Barrier{TxID: txID, State: StateCommitted, CreatedAt: time.Now().UTC()})
}

// BeginMessage is Begin for msg, whose ID must be set: with
// [Config.KeepMessages] the barrier row also keeps msg, for
// [Checker.Committed]; without it, it is Begin(ctx, tx, msg.ID).
func (c *Checker) BeginMessage(ctx context.Context, tx *gorm.DB, msg *txmsg.Message) error {
	row := Barrier{TxID: msg.ID, State: StateCommitted, CreatedAt: time.Now().UTC()}
	if c.cfg.KeepMessages {
		enc, err := encodeMessage(msg)
		if err != nil {
			return err
		}
		topic := msg.Topic
		row.Topic, row.Message = &topic, enc
	}
	return c.begin(ctx, tx, row)
}

func (c *Checker) begin(ctx context.Context, tx *gorm.DB, row Barrier) error {
	txID := row.TxID
	var err error
	// A duplicate key is an answer here, not a failure to log as one.
	ins := store.QuietDuplicate(tx).WithContext(ctx)
	if lit, ok := store.LiteralsFor(tx); ok {
		// One round trip instead of a prepare, an execute and a close.
		err = ins.Exec(c.literalInsert(lit, row, "")).Error
	} else {
		err = ins.Table(c.cfg.Table).Create(&row).Error
	}
	if err == nil {
		return nil
	}
	if !store.IsDuplicate(tx, err) {
		return fmt.Errorf("checker: insert barrier %s: %w", txID, err)
	}
	// The row is another transaction's, committed: the insert waits for a
	// transaction that holds the key uncommitted and goes through when that
	// one rolls back. InnoDB rolled back the failed statement only, so tx is
	// still open, and the insert left a shared lock on the row: the read
	// runs in tx, on its own connection, so it needs no second connection
	// from the pool (none may be free) and waits on no lock. A failed read
	// leaves the ID's outcome unknown, never "rolled back": the ID may have
	// committed.
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ResolveTimeout)
	defer cancel()
	state, serr := c.stateOn(rctx, store.Quiet(tx), txID, shareLock)
	switch {
	case serr != nil:
		return fmt.Errorf("%w: barrier row %s exists (the ID committed before, or a check-back rolled it back) and reading it failed: %w",
			txmsg.ErrOutcomeUnknown, txID, serr)
	case state == StateCommitted:
		return fmt.Errorf("%w: %s", txmsg.ErrDuplicateID, txID)
	default:
		return fmt.Errorf("%w: %s", txmsg.ErrRolledBackByCheck, txID)
	}
}

// literalInsert is the INSERT of row as one literal statement, followed by
// suffix.
func (c *Checker) literalInsert(lit store.Literals, row Barrier, suffix string) string {
	q := make([]byte, 0, 160+2*len(row.TxID)+len(suffix)+2*len(row.Message))
	q = append(q, "INSERT INTO `"...)
	q = append(q, c.cfg.Table...)
	if row.Topic != nil {
		q = append(q, "` (`tx_id`,`state`,`created_at`,`topic`,`message`) VALUES ("...)
	} else {
		q = append(q, "` (`tx_id`,`state`,`created_at`) VALUES ("...)
	}
	q = lit.String(q, row.TxID)
	q = append(q, ',')
	q = lit.String(q, row.State)
	q = append(q, ',')
	q = lit.Time(q, row.CreatedAt)
	if row.Topic != nil {
		q = append(q, ',')
		q = lit.String(q, *row.Topic)
		q = append(q, ',')
		q = lit.Bytes(q, row.Message)
	}
	q = append(q, ')')
	q = append(q, suffix...)
	return string(q)
}

// ErrBeyondPurgeHorizon means a transaction has no barrier row and may
// have begun before the purge horizon: its row may have been purged, so
// its outcome is unknown. The answer is UNKNOWN, never ROLLBACK.
var ErrBeyondPurgeHorizon = errors.New("checker: no barrier row, and the transaction may be older than the purge horizon (its row may have been purged)")

// Resolve answers a check-back for txID: [txmsg.StateCommitted] or
// [txmsg.StateRolledBack]. On a database error or timeout it returns
// [txmsg.StateUnknown] and the error; it never guesses.
//
// Resolve writes a rolled_back row for a txID it has never seen, so that a
// local transaction that starts after this answer cannot commit. After a
// purge, a txID that may be older than the purge horizon gets
// [txmsg.StateUnknown] and [ErrBeyondPurgeHorizon] instead, and nothing is
// written. Resolve knows a transaction's age only from a UUIDv7 ID; use
// ResolveSince when the half message is at hand.
func (c *Checker) Resolve(ctx context.Context, txID string) (txmsg.LocalState, error) {
	return c.ResolveSince(ctx, txID, time.Time{})
}

// ResolveSince is Resolve for a transaction that began no earlier than
// began: the born time of its half message, which the producer stamps
// before the local transaction writes its barrier row. The zero time means
// unknown. It matters only when there is no barrier row: then the earlier
// of began and the UUIDv7 ID's time is compared with the purge horizon.
func (c *Checker) ResolveSince(ctx context.Context, txID string, began time.Time) (txmsg.LocalState, error) {
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
	if err := c.checkHorizon(ctx, txID, began); err != nil {
		return txmsg.StateUnknown, err
	}
	row := Barrier{TxID: txID, State: StateRolledBack, CreatedAt: time.Now().UTC()}
	var res *gorm.DB
	if lit, ok := store.LiteralsFor(c.q); ok {
		// One round trip instead of a prepare, an execute and a close.
		q := c.literalInsert(lit, row, " ON DUPLICATE KEY UPDATE `tx_id` = `tx_id`")
		res = c.q.WithContext(ctx).Session(&gorm.Session{SkipDefaultTransaction: true}).Exec(q)
	} else {
		res = c.q.WithContext(ctx).Session(&gorm.Session{SkipDefaultTransaction: true}).
			Table(c.cfg.Table).Clauses(clause.OnConflict{DoNothing: true}).Create(&row)
	}
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

// Locking reads. Both see only committed rows, whatever the session's
// isolation level, and wait for a transaction that holds the key
// uncommitted. A read outside a transaction ends with FOR UPDATE, which
// read/write splitting (gorm's dbresolver, ProxySQL's usual query rules)
// sends to the primary: a replica that lags would answer "no row" for a
// transaction that committed. In autocommit the lock lasts the statement
// only. Inside a transaction (Begin's read after a duplicate key, which
// already holds a shared lock on the row) the read shares the lock.
const (
	updateLock = " FOR UPDATE"
	shareLock  = " LOCK IN SHARE MODE"
)

// state reads txID's barrier state with a locking read on the primary.
func (c *Checker) state(ctx context.Context, txID string) (string, error) {
	return c.stateOn(ctx, c.q, txID, updateLock)
}

// stateOn is state through db, which may be a transaction, with lock.
func (c *Checker) stateOn(ctx context.Context, db *gorm.DB, txID, lock string) (string, error) {
	var states []string
	var err error
	if lit, ok := store.LiteralsFor(db); ok {
		// One round trip instead of a prepare, an execute and a close.
		q := make([]byte, 0, 96+2*len(txID))
		q = append(q, "SELECT state FROM `"...)
		q = append(q, c.cfg.Table...)
		q = append(q, "` WHERE tx_id = "...)
		q = lit.String(q, txID)
		q = append(q, lock...)
		err = db.WithContext(ctx).Raw(string(q)).Scan(&states).Error
	} else {
		err = db.WithContext(ctx).
			Raw("SELECT state FROM `"+c.cfg.Table+"` WHERE tx_id = ?"+lock, txID).
			Scan(&states).Error
	}
	if err != nil {
		return "", err
	}
	if len(states) == 0 {
		return "", gorm.ErrRecordNotFound
	}
	return states[0], nil
}

// Ping checks that the barrier's database answers, with a locking read
// of the barrier table: with read/write splitting (gorm's dbresolver,
// ProxySQL's usual rules), such a read goes to the primary, so a primary
// that is down is not answered for by a replica. The sweeper probes it
// before it hands a half message back.
func (c *Checker) Ping(ctx context.Context) error {
	var ids []string
	err := c.q.WithContext(ctx).Raw("SELECT tx_id FROM `" + c.cfg.Table + "` LIMIT 1 FOR UPDATE").Scan(&ids).Error
	if err != nil {
		return fmt.Errorf("checker: %s: %w", c.cfg.Table, err)
	}
	return nil
}

// Horizon returns the purge horizon: barrier rows created before it may
// have been deleted. The zero time means nothing was ever purged.
func (c *Checker) Horizon(ctx context.Context) (time.Time, error) {
	var rows []horizonRow
	// On the primary (see updateLock): a replica that has not applied a
	// purge's horizon would let Resolve answer ROLLBACK for a committed
	// transaction whose row the purge deleted.
	err := c.q.WithContext(ctx).Table(c.HorizonTable()).Where("id = 1").Clauses(clause.Locking{Strength: "UPDATE"}).Find(&rows).Error
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1146:
		// No horizon table: Purge, which writes it before it deletes, has
		// never run on this database.
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("checker: read %s: %w", c.HorizonTable(), err)
	case len(rows) == 0:
		return time.Time{}, nil
	}
	return rows[0].PurgedBefore, nil
}

// checkHorizon returns ErrBeyondPurgeHorizon when txID, which has no
// barrier row, may have had one that a purge deleted.
func (c *Checker) checkHorizon(ctx context.Context, txID string, began time.Time) error {
	horizon, err := c.Horizon(ctx)
	if err != nil {
		return fmt.Errorf("checker: resolve %s: %w", txID, err)
	}
	if horizon.IsZero() {
		return nil
	}
	if t, ok := txmsg.IDTime(txID); ok && (began.IsZero() || t.Before(began)) {
		began = t
	}
	if began.IsZero() || began.Before(horizon.Add(HorizonMargin)) {
		return fmt.Errorf("%w: %s (began %s, horizon %s)", ErrBeyondPurgeHorizon, txID, stamp(began), horizon.UTC().Format(time.RFC3339))
	}
	return nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ErrCutoffInWindow means Purge was asked to delete barrier rows the broker
// may still ask about.
var ErrCutoffInWindow = errors.New("checker: purge cutoff is inside the broker's check window")

// Purge deletes barrier rows older than olderThan, in batches of batch rows
// (0 means [txmsg.DefaultPurgeBatch]). It refuses an olderThan shorter than the configured
// CheckWindow. Before deleting, it records the cutoff as the purge horizon:
// a later check-back for a transaction older than that gets UNKNOWN, never
// ROLLBACK (see [ErrBeyondPurgeHorizon]).
func (c *Checker) Purge(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if olderThan < c.cfg.CheckWindow {
		return 0, fmt.Errorf("%w: %s < %s", ErrCutoffInWindow, olderThan, c.cfg.CheckWindow)
	}
	cutoff := time.Now().UTC().Add(-olderThan)
	// The horizon is recorded, and committed, before any row is deleted: a
	// Resolve that finds a row missing then always sees a horizon at least
	// as late as the deletion.
	err := c.q.WithContext(ctx).Exec("INSERT INTO `"+c.HorizonTable()+"` (id, purged_before) VALUES (1, ?) "+
		"ON DUPLICATE KEY UPDATE purged_before = GREATEST(purged_before, VALUES(purged_before))", cutoff).Error
	if err != nil {
		return 0, fmt.Errorf("checker: record the purge horizon in %s (run Migrate): %w", c.HorizonTable(), err)
	}
	n, err := store.PurgeBefore(ctx, c.q, c.cfg.Table, "tx_id", "created_at", cutoff, batch)
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
	err := c.q.WithContext(ctx).Table(c.cfg.Table).Select("state, COUNT(*) AS n").Group("state").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("checker: count %s: %w", c.cfg.Table, err)
	}
	out := map[string]int64{StateCommitted: 0, StateRolledBack: 0}
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, nil
}

package txmsg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txmsg/txmsg/internal/store"
)

// Default table names of the consumer side. The parked table's default
// name, txmsg_dead_letter, is the one existing databases have.
const (
	DefaultInboxTable  = "txmsg_inbox"
	DefaultParkedTable = "txmsg_dead_letter"
)

// DefaultPurgeBatch is the number of rows each purge statement deletes
// when a Purge method is given a batch of 0: [Inbox.Purge], the outbox's
// and the checker's.
const DefaultPurgeBatch = store.DefaultPurgeBatch

// MinInboxPurgeAge is the youngest age [Inbox.Purge] accepts. An inbox row
// is what turns a redelivery into a duplicate: once it is purged, a
// redelivery of its message runs the handler, and its effects, a second
// time. So no row may go while the broker can still redeliver its
// message. On RocketMQ's default settings (a consumer's 16 reconsume
// attempts, ConsumerConfig.MaxReconsumeTimes in adapters/txrmq, on the
// broker's default messageDelayLevel schedule of 10 s, 30 s, 1 min, 2 min,
// … 20 min, 30 min, 1 h, 2 h) the redeliveries of one message span 4 h
// 45 min 40 s; MinInboxPurgeAge is that with margin. Consumers configured
// for more attempts or longer delay levels redeliver later: purge their
// rows after their own span (txrmq's ConsumerConfig.RedeliverySpan), not
// after this minimum.
const MinInboxPurgeAge = 5 * time.Hour

// InboxRow is one handled message in the inbox table: the dedupe record.
// consumer_group, msg_id and topic are VARBINARY so that they compare byte
// for byte whatever the database's collation: messages "Order-1" and
// "order-1" are two messages, and each runs its handler.
type InboxRow struct {
	ID            int64     `gorm:"primaryKey;autoIncrement"`
	ConsumerGroup string    `gorm:"type:varbinary(255);size:255;not null;uniqueIndex:uk_txmsg_inbox_group_msg,priority:1"`
	MsgID         string    `gorm:"column:msg_id;type:varbinary(255);size:255;not null;uniqueIndex:uk_txmsg_inbox_group_msg,priority:2"`
	Topic         string    `gorm:"type:varbinary(127);size:127;not null"`
	HandledAt     time.Time `gorm:"precision:6;not null;index:idx_txmsg_inbox_handled_at"`
}

// ParkedRow is a parked message: one row of the parked table. A consumer
// parks a message it could not decode (an ordered consumer also one whose
// handler failed for the last time, the sweeper a half message whose
// outcome cannot be known), with its raw bytes so nothing is lost. It is
// acknowledged to the broker and never retried by itself; see
// docs/operations.md for inspecting and replaying. The identifier columns
// are VARBINARY like the inbox's; tag and keys stay text: they copy what
// arrived, and nothing looks rows up by them.
type ParkedRow struct {
	ID              int64     `gorm:"primaryKey;autoIncrement"`
	ConsumerGroup   string    `gorm:"type:varbinary(255);size:255;not null;uniqueIndex:uk_txmsg_dead_group_msg,priority:1"`
	MsgID           string    `gorm:"column:msg_id;type:varbinary(255);size:255;not null;uniqueIndex:uk_txmsg_dead_group_msg,priority:2"`
	BrokerMessageID string    `gorm:"type:varbinary(255);size:255;not null"`
	Topic           string    `gorm:"type:varbinary(127);size:127;not null"`
	Tag             string    `gorm:"size:255;not null"`
	Keys            string    `gorm:"size:1024;not null"`
	Properties      string    `gorm:"type:text;not null"`
	Body            []byte    `gorm:"type:longblob"`
	Error           string    `gorm:"type:text;not null"`
	Attempt         int       `gorm:"not null"`
	ParkedAt        time.Time `gorm:"precision:6;not null;index:idx_txmsg_dead_parked_at"`
}

// InboxConfig configures an [Inbox].
type InboxConfig struct {
	// Table is the inbox table. Default [DefaultInboxTable].
	Table string
	// ParkedTable is the table of parked messages. Default
	// [DefaultParkedTable].
	ParkedTable string
	// FailingTable is the table of messages whose handler is failing
	// ([FailingRow]). Default [DefaultFailingTable].
	FailingTable string
	// Logger receives the inbox's logs (duplicates skipped, at debug
	// level); nil means slog.Default().
	Logger *slog.Logger
	// Hooks observe every message processed through this inbox
	// (HookBeforeHandle, HookConsumed), whichever consumer runs it. A hook
	// that implements no hook interface is refused. Optional.
	Hooks Hooks
}

// Inbox gives handlers exactly-once effects: each (consumer group, message
// ID) pair runs its handler's transaction to commit at most once.
type Inbox struct {
	db      *gorm.DB // the inbox's own statements (store.Quiet)
	user    *gorm.DB // as given: the handlers' transactions
	table   string
	parked  string
	failing string
	logger  *slog.Logger
	hooks   Hooks
	failLog failingLog
}

// Outcome says what the inbox did with a message.
type Outcome int

const (
	// OutcomeHandled means the handler ran and its transaction committed.
	OutcomeHandled Outcome = iota + 1
	// OutcomeDuplicate means the message was handled before; the handler
	// did not run.
	OutcomeDuplicate
	// OutcomeParked means the message was parked in the inbox's parked
	// table: its body could not be decoded (or, from an ordered consumer,
	// its handler failed for the last time).
	OutcomeParked
)

// String returns "handled", "duplicate" or "parked".
func (o Outcome) String() string {
	switch o {
	case OutcomeHandled:
		return "handled"
	case OutcomeDuplicate:
		return "duplicate"
	case OutcomeParked:
		return "parked"
	default:
		return "failed"
	}
}

// NewInbox returns an Inbox storing its rows through db. db's MySQL DSN
// must carry parseTime=true: without it NewInbox returns an error wrapping
// [ErrInvalidConfig] that says so. A db over a *sql.DB of the caller's
// (gorm's mysql.New with Conn) is checked with one query.
func NewInbox(db *gorm.DB, cfg InboxConfig) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: inbox: db is nil", ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := store.CheckParseTime(db); err != nil {
		return nil, fmt.Errorf("%w: inbox: %w", ErrInvalidConfig, err)
	}
	hooks, err := cfg.Hooks.bind(cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return &Inbox{db: store.Quiet(db), user: db, table: cfg.Table, parked: cfg.ParkedTable, failing: cfg.FailingTable, hooks: hooks,
		logger: cfg.Logger.With("component", "txmsg.inbox", "table", cfg.Table)}, nil
}

// WithDefaults returns c with its zero fields set to their defaults:
// Table [DefaultInboxTable], ParkedTable [DefaultParkedTable],
// FailingTable [DefaultFailingTable], Logger slog.Default(). It checks nothing; see [InboxConfig.Validate].
func (c InboxConfig) WithDefaults() InboxConfig {
	if c.Table == "" {
		c.Table = DefaultInboxTable
	}
	if c.ParkedTable == "" {
		c.ParkedTable = DefaultParkedTable
	}
	if c.FailingTable == "" {
		c.FailingTable = DefaultFailingTable
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks a config that went through [InboxConfig.WithDefaults]:
// a zero field that has a default is refused. Its errors wrap
// [ErrInvalidConfig] and name the field.
func (c InboxConfig) Validate() error {
	for _, t := range []struct{ field, name string }{{"Table", c.Table}, {"ParkedTable", c.ParkedTable}, {"FailingTable", c.FailingTable}} {
		if !store.ValidIdent(t.name) {
			return fmt.Errorf("%w: inbox: %s %q is not a plain SQL identifier", ErrInvalidConfig, t.field, t.name)
		}
	}
	if c.Logger == nil {
		return fmt.Errorf("%w: inbox: Logger is nil; call WithDefaults first", ErrInvalidConfig)
	}
	if err := c.Hooks.Validate(); err != nil {
		return fmt.Errorf("inbox: Hooks: %w", err)
	}
	return nil
}

// Migrate creates or updates the inbox, parked and failing tables. On tables
// created before their identifier columns were binary it converts those
// columns first (one ALTER TABLE per table, which rebuilds it); see
// docs/reliability.md.
func (in *Inbox) Migrate(ctx context.Context) error {
	for _, t := range []struct {
		name  string
		model any
	}{{in.table, &InboxRow{}}, {in.parked, &ParkedRow{}}, {in.failing, &FailingRow{}}} {
		converted, err := store.Migrate(ctx, in.db, t.name, t.model)
		if len(converted) > 0 {
			in.logger.Warn("converted identifier columns to binary: IDs now compare byte for byte", "migrated_table", t.name, "columns", converted)
		}
		if err != nil {
			return fmt.Errorf("txmsg: migrate %s: %w", t.name, err)
		}
	}
	return nil
}

// Tables returns the inbox and parked table names.
func (in *Inbox) Tables() (inbox, parked string) { return in.table, in.parked }

// DB returns the database handle the inbox was built on, where the
// handlers' transactions run.
func (in *Inbox) DB() *gorm.DB { return in.user }

// Ping reports whether the inbox's database answers and its table can be
// read. Consumers' health checks use it.
func (in *Inbox) Ping(ctx context.Context) error {
	// A locking read: read/write splitting (gorm's dbresolver, ProxySQL's
	// usual rules) sends it to the primary, so a replica does not answer
	// for a primary that is down. In autocommit the lock lasts the
	// statement only.
	var ids []int64
	if err := in.db.WithContext(ctx).Table(in.table).Limit(1).Clauses(clause.Locking{Strength: "UPDATE"}).Pluck("id", &ids).Error; err != nil {
		return fmt.Errorf("txmsg: inbox %s: %w", in.table, err)
	}
	return nil
}

var errAlreadyHandled = errors.New("txmsg: already handled")

// run runs fn in a transaction whose first statement records (group, key)
// in the inbox. When that pair is already recorded, fn does not run and the
// outcome is [OutcomeDuplicate]. When fn fails or panics, everything rolls
// back and the error is returned (a panic as [*PanicError]).
func (in *Inbox) run(ctx context.Context, group, topic, key string, fn func(ctx context.Context, tx *gorm.DB) error) (Outcome, error) {
	if group == "" || key == "" {
		return 0, fmt.Errorf("%w: inbox: consumer group and message key are required", ErrInvalidMessage)
	}
	err := in.user.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row := InboxRow{ConsumerGroup: group, MsgID: key, Topic: topic, HandledAt: time.Now().UTC()}
		// A duplicate key is a redelivered copy: an outcome, not an error
		// for the caller's logger. fn gets tx as the caller made it.
		if err := store.QuietDuplicate(tx).Table(in.table).Create(&row).Error; err != nil {
			if store.IsDuplicate(tx, err) {
				return errAlreadyHandled
			}
			return fmt.Errorf("txmsg: record %s in %s: %w", key, in.table, err)
		}
		return callRecovering(ctx, tx, fn)
	})
	switch {
	case err == nil:
		return OutcomeHandled, nil
	case errors.Is(err, errAlreadyHandled):
		in.logger.Debug("already handled; skipping", "group", group, "txmsg_id", key, "topic", topic, "state", OutcomeDuplicate.String())
		return OutcomeDuplicate, nil
	default:
		return 0, err
	}
}

// callRecovering runs fn and turns a panic into a *PanicError.
func callRecovering(ctx context.Context, tx *gorm.DB, fn func(ctx context.Context, tx *gorm.DB) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, tx)
}

// callLocal runs local with tx, turning a panic into a [*PanicError]. Mode
// implementations use it so a panicking LocalTx rolls back instead of
// crashing the process.
func callLocal(ctx context.Context, tx *gorm.DB, local LocalTx) error {
	return callRecovering(ctx, tx, local)
}

// park stores r in the parked table with cause, once per (group,
// message key). A second park of the same message is a no-op.
func (in *Inbox) park(ctx context.Context, group string, r *Received, cause error) error {
	m := r.Message
	props, _ := jsonString(m.Properties)
	row := ParkedRow{
		ConsumerGroup:   group,
		MsgID:           m.ID,
		BrokerMessageID: r.BrokerMessageID,
		Topic:           m.Topic,
		Tag:             m.Tag,
		Keys:            joinKeys(m.Keys),
		Properties:      props,
		Body:            m.Body,
		Error:           cause.Error(),
		Attempt:         r.Attempt,
		ParkedAt:        time.Now().UTC(),
	}
	err := in.db.WithContext(ctx).Table(in.parked).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error
	if err != nil {
		return fmt.Errorf("txmsg: park %s in %s: %w", m.ID, in.parked, err)
	}
	return nil
}

// Purge deletes inbox rows handled more than olderThan ago, in batches of
// batch rows (0 means [DefaultPurgeBatch]). It refuses, with [ErrPurgeTooYoung] and
// without deleting anything, an olderThan shorter than [MinInboxPurgeAge]:
// a redelivery after an early purge would run its handler twice.
func (in *Inbox) Purge(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if olderThan < MinInboxPurgeAge {
		return 0, fmt.Errorf("%w: inbox: %s < %s", ErrPurgeTooYoung, olderThan, MinInboxPurgeAge)
	}
	return store.PurgeBefore(ctx, in.db, in.table, "id", "handled_at", time.Now().UTC().Add(-olderThan), batch)
}

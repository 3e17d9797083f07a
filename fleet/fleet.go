// Package fleet is the instance table: every txmsg consumer, ordered
// consumer, sweeper and transactional producer of a service writes a row
// there at each heartbeat, with its health, its last error and counters
// of its work, so that one place (the dashboard, or a query) shows every
// instance of every replica, which of them fail, and which stopped
// without a clean shutdown.
//
// A row is keyed by (kind, name, instance): the component's kind
// ([KindConsumer], ...), its group, and an instance ID made of the host
// name, the process ID and a random part, fixed for the component's life.
// Times are the database's clock (UTC_TIMESTAMP), so the hosts' clocks
// need not agree. A component deletes its row when it is closed; the
// rows of instances that stopped heartbeating for longer than
// [Config.Expiry] are deleted by the live ones, so the table stays as
// large as the fleet.
//
// The counters only grow while the instance runs, and start again at zero
// when it restarts (a new row); rates over several instances are sums of
// each row's increase (see the dashboard's history).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
)

// Defaults of [Config].
const (
	DefaultTable    = "txmsg_instances"
	DefaultInterval = 10 * time.Second
	DefaultExpiry   = time.Hour
)

// staleBeats is how many heartbeat intervals may pass without a heartbeat
// before an instance counts as stale.
const staleBeats = 3

// Kinds of instance, the kind column.
const (
	KindConsumer        = "consumer"
	KindOrderedConsumer = "ordered_consumer"
	KindSweeper         = "sweeper"
	KindProducer        = "producer"
	KindForwarder       = "forwarder"
)

// States of an instance, as [List] reports them.
const (
	// StateLive: it heartbeats and its own Health is nil.
	StateLive = "live"
	// StateFailing: it heartbeats, and its Health returned an error.
	StateFailing = "failing"
	// StateStale: no heartbeat for more than three of its intervals, by
	// the database's clock: the process died, hangs, or lost the database.
	StateStale = "stale"
)

// Config is a component's heartbeat into the instance table. Every
// config that has one (txrmq's ConsumerConfig, OrderedConsumerConfig,
// SweeperConfig, TransactionalConfig; stack.Config) fills it with
// [Config.WithDefaults] and checks it with [Config.Validate].
type Config struct {
	// Table is the instance table. Default [DefaultTable]. It must exist:
	// [Migrate] creates it (stack.Stack.Migrate and txmsgctl migrate call
	// it).
	Table string
	// Interval is how often the component writes its row: its health (its
	// own Health method, bounded by Interval) and its counters. Default
	// [DefaultInterval] (10 s); negative turns the heartbeat off. A write
	// that fails is logged and tried again at the next tick; it never
	// blocks or fails the component.
	Interval time.Duration
	// Expiry is how long after its last heartbeat the row of an instance
	// that stopped without closing is deleted. Default [DefaultExpiry]
	// (1 h). It must be longer than three Intervals, when an instance
	// becomes stale.
	Expiry time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults. It
// checks nothing; see [Config.Validate].
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Expiry == 0 {
		c.Expiry = DefaultExpiry
	}
	return c
}

// Validate checks a config that went through [Config.WithDefaults]. Its
// errors wrap [txmsg.ErrInvalidConfig] and name the field; the configs
// that hold a Config put their own name and "Heartbeat" in front.
func (c Config) Validate() error {
	switch {
	case !store.ValidIdent(c.Table):
		return fmt.Errorf("%w: fleet: Table %q must be a plain SQL identifier of at most 64 characters", txmsg.ErrInvalidConfig, c.Table)
	case c.Interval == 0:
		return fmt.Errorf("%w: fleet: Interval is 0: set it, or a negative value to turn the heartbeat off", txmsg.ErrInvalidConfig)
	case c.Interval > 0 && c.Expiry <= staleBeats*c.Interval:
		return fmt.Errorf("%w: fleet: Expiry %v must exceed three Intervals (%v)", txmsg.ErrInvalidConfig, c.Expiry, staleBeats*c.Interval)
	}
	return nil
}

// ValidateIn is Validate for the Heartbeat field of what's config: the
// error names what and the field Heartbeat.
func (c Config) ValidateIn(what string) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%s: Heartbeat: %w", what, err)
	}
	return nil
}

// Instance is one row of the instance table.
type Instance struct {
	// Kind is the component's kind ([KindConsumer], ...).
	Kind string `gorm:"type:varbinary(32);size:32;primaryKey;not null"`
	// Name is the component's group.
	Name string `gorm:"type:varbinary(255);size:255;primaryKey;not null"`
	// ID is "<host>-<pid>-<random>", fixed for the component's life.
	ID string `gorm:"column:instance;type:varbinary(255);size:255;primaryKey;not null"`
	// StartedAt is the first heartbeat, HeartbeatAt the last, by the
	// database's clock.
	StartedAt   time.Time `gorm:"precision:6;not null"`
	HeartbeatAt time.Time `gorm:"precision:6;not null;index:idx_instances_heartbeat"`
	// IntervalMicros is the instance's Heartbeat.Interval in microseconds.
	IntervalMicros int64 `gorm:"column:interval_us;not null;default:0"`
	// Healthy is whether the instance's Health returned nil at its last
	// heartbeat; LastError is that error otherwise, cut to 1024 bytes.
	Healthy   bool   `gorm:"not null;default:true"`
	LastError string `gorm:"size:1024;not null;default:''"`
	// Counters since the instance started; see [Counts].
	Counts `gorm:"embedded"`

	// State is [StateLive], [StateFailing] or [StateStale]; Silent how
	// long since the last heartbeat. [List] fills both; they are not
	// stored.
	State  string        `gorm:"-"`
	Silent time.Duration `gorm:"-"`
}

// Counts are an instance's counters since it started. Each component
// counts what it does: a producer Sent (committed local transactions),
// Failed (half sends that failed, local transactions rolled back or of
// unknown outcome) and its check-back answers; a consumer Handled,
// Duplicates, Parked and Failed (handler attempts that failed); a
// sweeper Swept (discarded half messages republished), Parked and Failed.
type Counts struct {
	Sent              int64 `gorm:"not null;default:0"`
	Handled           int64 `gorm:"not null;default:0"`
	Duplicates        int64 `gorm:"not null;default:0"`
	Parked            int64 `gorm:"not null;default:0"`
	Failed            int64 `gorm:"not null;default:0"`
	Swept             int64 `gorm:"not null;default:0"`
	CheckBackCommit   int64 `gorm:"column:checkback_commit;not null;default:0"`
	CheckBackRollback int64 `gorm:"column:checkback_rollback;not null;default:0"`
	CheckBackUnknown  int64 `gorm:"column:checkback_unknown;not null;default:0"`
}

// Columns are the counter columns of the table, in the order of
// [Counts.Values].
var Columns = []string{"sent", "handled", "duplicates", "parked", "failed", "swept", "checkback_commit", "checkback_rollback", "checkback_unknown"}

// Values returns the counters in the order of [Columns].
func (c Counts) Values() []int64 {
	return []int64{c.Sent, c.Handled, c.Duplicates, c.Parked, c.Failed, c.Swept, c.CheckBackCommit, c.CheckBackRollback, c.CheckBackUnknown}
}

// Migrate creates the instance table, or adds the columns it lacks. The
// file fleet.sql next to this package holds the same table for migration
// tools.
func Migrate(ctx context.Context, db *gorm.DB, table string) error {
	if !store.ValidIdent(table) {
		return fmt.Errorf("%w: fleet: table name %q must be a plain SQL identifier", txmsg.ErrInvalidConfig, table)
	}
	if _, err := store.Migrate(ctx, store.Quiet(db), table, &Instance{}); err != nil {
		return fmt.Errorf("fleet: migrate %s: %w", table, err)
	}
	return nil
}

// ErrNoTable means the instance table does not exist.
var ErrNoTable = errors.New("fleet: the instance table does not exist; create it with fleet.Migrate, Stack.Migrate or txmsgctl migrate -only fleet")

// dbClock is the database's clock, as every time of the table.
const dbClock = "UTC_TIMESTAMP(6)"

// List returns every row of the instance table, by kind, name and
// instance, each with its state by the database's clock. It returns an
// error wrapping [ErrNoTable] when the table does not exist.
func List(ctx context.Context, db *gorm.DB, table string) ([]Instance, error) {
	if !store.ValidIdent(table) {
		return nil, fmt.Errorf("%w: fleet: table name %q must be a plain SQL identifier", txmsg.ErrInvalidConfig, table)
	}
	if !db.WithContext(ctx).Migrator().HasTable(table) {
		return nil, fmt.Errorf("%w (%s)", ErrNoTable, table)
	}
	var rows []struct {
		Instance `gorm:"embedded"`
		SilentUS int64
	}
	err := db.WithContext(ctx).Table(table).
		Select("*, TIMESTAMPDIFF(MICROSECOND, heartbeat_at, " + dbClock + ") AS silent_us").
		Order("kind, name, instance").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("fleet: list %s: %w", table, err)
	}
	out := make([]Instance, len(rows))
	for i, r := range rows {
		in := r.Instance
		in.Silent = time.Duration(max(r.SilentUS, 0)) * time.Microsecond
		interval := time.Duration(in.IntervalMicros) * time.Microsecond
		if interval <= 0 {
			interval = DefaultInterval
		}
		switch {
		case in.Silent > staleBeats*interval:
			in.State = StateStale
		case !in.Healthy:
			in.State = StateFailing
		default:
			in.State = StateLive
		}
		out[i] = in
	}
	return out, nil
}

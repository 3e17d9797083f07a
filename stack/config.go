package stack

import (
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

// Delivery modes, as [Stack.Mode] reports them.
const (
	ModeTransactional = "transactional"
	ModeOutbox        = "outbox"
)

// SweeperSuffix is appended to the producer group to name the sweeper's
// group when [SweeperConfig.Group] is empty.
const SweeperSuffix = "-sweeper"

// Part is a set of a stack's parts; see [Config.Parts].
type Part uint8

const (
	// PartProducer is the [txmsg.Transactor]: the transactional producer
	// with its checker, or the outbox writer.
	PartProducer Part = 1 << iota
	// PartBackground gets committed events out after the fact: the sweeper
	// with its publisher, or the relays with theirs.
	PartBackground
	// PartAll is both, what the zero value of [Config.Parts] means.
	PartAll = PartProducer | PartBackground
)

// String returns "producer", "background", "producer+background" or, for
// an invalid set, its number.
func (p Part) String() string {
	switch p {
	case PartProducer:
		return "producer"
	case PartBackground:
		return "background"
	case PartAll:
		return "producer+background"
	default:
		return fmt.Sprintf("Part(%d)", uint8(p))
	}
}

// Config is what both modes need.
type Config struct {
	// DB is the service's database: the stack's tables live in it and the
	// local transactions run on it. The MySQL DSN needs parseTime=true;
	// the constructors refuse a handle without it. Required.
	DB *gorm.DB
	// RocketMQ reaches the cluster. Required, except for a local-table
	// stack that runs only [PartProducer], which needs no broker. Its
	// Logger, when set, is the RocketMQ parts' logger instead of
	// Config.Logger.
	RocketMQ txrmq.Conn
	// Group is the service's producer group; see the package
	// documentation for the groups derived from it. Required where
	// RocketMQ is.
	Group string
	// SendTimeout, Retries and MaxBodySize are the RocketMQ producers'
	// settings of those names (see [txrmq.TransactionalConfig]); zero
	// means their defaults.
	SendTimeout time.Duration
	Retries     int
	MaxBodySize int
	// Topics are the topics the service publishes to. The producers fetch
	// their routes at Start, and in transactional mode Health checks them.
	// Optional but recommended.
	Topics []string
	// Parts are the parts this process runs. Zero means [PartAll].
	Parts Part
	// Logger is every part's logger, unless that part's own config sets
	// one. Nil means slog.Default().
	Logger *slog.Logger
	// Hooks observe every part's events (see [txmsg.Hook]): the
	// transactional producer's, the sweeper's and its publisher's, or the
	// outbox's, the relays' and their publisher's. Optional.
	Hooks txmsg.Hooks
}

// TransactionalConfig configures a transactional-mode stack; see
// [Transactional].
type TransactionalConfig struct {
	Config
	// Checker configures the barrier table. Optional.
	Checker checker.Config
	// Sweeper configures the sweeper. Optional.
	Sweeper SweeperConfig
	// CheckBacks tunes how the producer answers the broker's check-backs.
	// Optional.
	CheckBacks CheckBackConfig
}

// CheckBackConfig tunes the transactional producer's check-back answers;
// each zero field takes txrmq's default.
type CheckBackConfig struct {
	// Workers is [txrmq.TransactionalConfig.CheckBackWorkers].
	Workers int
	// Queue is [txrmq.TransactionalConfig.CheckBackQueue].
	Queue int
	// CacheSize is [txrmq.TransactionalConfig.CheckBackCacheSize].
	CacheSize int
	// CacheAge is [txrmq.TransactionalConfig.CheckBackCacheAge].
	CacheAge time.Duration
}

// SweeperConfig configures the sweeper of a transactional stack and its
// publisher. The rest of their settings come from [Config.RocketMQ].
type SweeperConfig struct {
	// Group is the sweeper's consumer group and its publisher's producer
	// group. Default: the producer group with [SweeperSuffix] appended. It
	// must differ from the producer group.
	Group string
	// HoldFor is [txrmq.SweeperConfig.HoldFor].
	HoldFor time.Duration
	// RetryDelayLevel is [txrmq.SweeperConfig.RetryDelayLevel].
	RetryDelayLevel int
}

// OutboxConfig configures a local-table stack; see [Outbox].
type OutboxConfig struct {
	Config
	// Outbox configures the outbox table. Its MaxBodySize defaults to
	// Config.MaxBodySize. Optional.
	Outbox outbox.Config
	// Relay configures the relays. Its Outbox field is the stack's; leave
	// it nil. Optional.
	Relay outbox.RelayConfig
	// Relays is how many relays this process runs, sharing one publisher.
	// Default 1. With more than one and a Relay.Name, the relays are named
	// Name-1 to Name-<Relays>.
	Relays int
	// MaxBatch is the relays' publisher's [txrmq.PublisherConfig.MaxBatch].
	MaxBatch int
	// Checker answers the check-backs that reach the relays' publisher. The
	// publisher is in Group, so while a service switches from
	// transactional mode (some replicas still sending half messages, or
	// half messages still unresolved on the broker) the broker sends that
	// group's check-backs to it too. Set it to a checker on the barrier
	// table of the transactional mode (Migrate then creates that table
	// too); without it such check-backs are answered UNKNOWN and logged.
	// Optional.
	Checker *checker.Checker
}

// invalid returns an error wrapping txmsg.ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: stack: "+format, append([]any{txmsg.ErrInvalidConfig}, args...)...)
}

// check validates what both modes share and fills the defaults.
func (c *Config) check() error {
	if c.DB == nil {
		return invalid("DB is nil")
	}
	if c.Parts == 0 {
		c.Parts = PartAll
	}
	if c.Parts&^PartAll != 0 {
		return invalid("Parts %d is not a combination of PartProducer and PartBackground", uint8(c.Parts))
	}
	for _, t := range c.Topics {
		if err := txmsg.ValidateTopic(t); err != nil {
			return fmt.Errorf("%w: stack: %w", txmsg.ErrInvalidConfig, err)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// rocketMQ is the parts' connection to the cluster.
func (c *Config) rocketMQ() txrmq.Conn {
	rc := c.RocketMQ
	if rc.Logger == nil {
		rc.Logger = c.Logger
	}
	return rc
}

// sweeperGroup returns the sweeper's group, checked.
func (c *TransactionalConfig) sweeperGroup() (string, error) {
	if c.Group == "" {
		return "", invalid("Group is empty: the producer group is required")
	}
	g := c.Sweeper.Group
	if g == "" {
		g = c.Group + SweeperSuffix
	}
	if g == c.Group {
		return "", invalid("Sweeper.Group %q is the producer group: the broker would send check-backs to the sweeper's publisher, which cannot answer them", g)
	}
	return g, nil
}

func (c *OutboxConfig) check() error {
	if c.Relay.Outbox != nil {
		return invalid("Relay.Outbox must be nil: the stack sets it")
	}
	if len(c.Outbox.Hooks) > 0 || len(c.Relay.Hooks) > 0 {
		return invalid("set Hooks on stack.Config, not on Outbox or Relay: the stack hands them to every part")
	}
	if c.Relays < 0 {
		return invalid("Relays must not be negative")
	}
	if c.Relays == 0 {
		c.Relays = 1
	}
	if c.Outbox.MaxBodySize == 0 {
		c.Outbox.MaxBodySize = c.MaxBodySize
	}
	if c.Outbox.Logger == nil {
		c.Outbox.Logger = c.Logger
	}
	if c.Relay.Logger == nil {
		c.Relay.Logger = c.Logger
	}
	c.Outbox.Hooks, c.Relay.Hooks = c.Hooks, c.Hooks
	return nil
}

package stack

import (
	"fmt"
	"log/slog"
	"reflect"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/txmsg"
)

// Delivery modes, as [Stack.Mode] reports them.
const (
	ModeTransactional = "transactional"
	ModeOutbox        = "outbox"
)

// SweeperSuffix is appended to the producer group to name the sweeper's
// group when TransactionalConfig.Sweeper.Group is empty.
const SweeperSuffix = "-sweeper"

// ForwarderSuffix is appended to the producer group to name the
// forwarder's group when TransactionalConfig.Forwarder.Group is empty.
const ForwarderSuffix = "-delay"

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

// Config is what both modes need. The service's database is not part of
// it: it is the first argument of [Transactional] and [Outbox].
type Config struct {
	// RocketMQ reaches the cluster. Required, except for a local-table
	// stack that runs only [PartProducer], which needs no broker. Its
	// Logger, when set, is the RocketMQ parts' logger instead of
	// Config.Logger.
	RocketMQ txrmq.Conn
	// Group is the service's producer group; see the package
	// documentation for the groups derived from it. Required where
	// RocketMQ is.
	Group string
	// Topics are the topics the service publishes to. The producers fetch
	// their routes at Start, and in transactional mode Health checks them.
	// Optional but recommended.
	Topics []string
	// Parts are the parts this process runs. Default [PartAll].
	Parts Part
	// Logger is every part's logger, unless that part's own config sets
	// one. Default slog.Default().
	Logger *slog.Logger
	// Hooks observe every part's events (see [txmsg.Hook]): the
	// transactional producer's, the sweeper's and its publisher's, or the
	// outbox's, the relays' and their publisher's. Optional.
	Hooks txmsg.Hooks
	// Heartbeat is the instance table the transactional producer, the
	// sweeper and the forwarder write their rows into (see package fleet), and which
	// [Stack.Migrate] creates in both modes, for the service's consumers
	// too. Default: txmsg_instances, every 10 s.
	Heartbeat fleet.Config
	// Reconcile turns the reconciler on (see [txrmq.Reconciler]): it
	// watches the cluster's masters and, after a failover or a restart
	// that may have lost acknowledged messages, publishes again the
	// committed events of Reconciler.Window the brokers no longer have.
	// With [PartBackground] the stack runs it, through the sweeper's or the
	// relays' publisher; in transactional mode it also turns on
	// checker.Config.KeepMessages, which every producer of the service must
	// have for its events to be recoverable. Default false.
	Reconcile bool
	// Reconciler tunes the reconciler: Name, Window, Interval,
	// Concurrency, Batch and QueryTimeout. Its Conn and Hooks come from
	// the stack and must be left zero. Optional.
	Reconciler txrmq.ReconcilerConfig
}

// TransactionalConfig configures a transactional-mode stack; see
// [Transactional]. Its parts' configs are their packages' own; the
// settings the stack hands every part (the RocketMQ client, the topics,
// the hooks) are left zero in them.
type TransactionalConfig struct {
	Config
	// Checker configures the barrier table. Its Logger defaults to
	// Config.Logger. Optional.
	Checker checker.Config
	// Producer tunes the transactional producer: SendTimeout, Retries,
	// MaxBodySize (which the sweeper's publisher uses too) and the
	// CheckBack* fields (how it answers the broker's check-backs); each
	// zero field takes txrmq's default. Its Conn, Group, Hooks and Topics
	// come from the stack and must be left zero. Optional.
	Producer txrmq.TransactionalConfig
	// Sweeper configures the sweeper and its publisher: HoldFor,
	// RetryDelayLevel and Parked, and Group, the sweeper's consumer group
	// and its publisher's producer group. Group defaults to the producer
	// group with [SweeperSuffix] appended and must differ from it. Its
	// Conn, Hooks and ProducerGroups come from the stack and must be left
	// zero. Optional.
	Sweeper txrmq.SweeperConfig
	// Forwarder configures the forwarder of delayed messages
	// (txmsg.WithDelay), run with [PartBackground]: Group, its consumer
	// and producer group, defaults to the producer group with
	// [ForwarderSuffix] appended; Topic defaults to Producer.DelayTopic
	// and must equal it; Mode, DelayLevels and TimerPrecision tune how the
	// broker waits. Its Conn, DB and Heartbeat come from the stack and
	// must be left zero. Optional.
	Forwarder txrmq.ForwarderConfig
}

// OutboxConfig configures a local-table stack; see [Outbox].
type OutboxConfig struct {
	Config
	// Outbox configures the outbox table. Its MaxBodySize defaults to
	// Publisher.MaxBodySize, its Logger to Config.Logger. Optional.
	Outbox outbox.Config
	// Relay configures the relays. Its Logger defaults to Config.Logger.
	// With more than one relay, they are named Relay.Name-1 to
	// Relay.Name-<Relays>. Optional.
	Relay outbox.RelayConfig
	// Relays is how many relays this process runs, sharing one publisher.
	// Default 1.
	Relays int
	// Publisher configures the relays' publisher: SendTimeout, Retries,
	// MaxBodySize, MaxBatch, CheckBack*, and Checker, which answers the
	// check-backs that reach it. The publisher is in Group, so while a service switches from
	// transactional mode (some replicas still sending half messages, or
	// half messages still unresolved on the broker) the broker sends that
	// group's check-backs to it too. Set Checker to a checker on the
	// barrier table of the transactional mode (Migrate then creates that
	// table too); without it such check-backs are answered UNKNOWN and
	// logged. Its Conn, Group, Hooks and Topics come from the stack and
	// must be left zero. Optional.
	Publisher txrmq.PublisherConfig
}

// invalid returns an error wrapping txmsg.ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: stack: "+format, append([]any{txmsg.ErrInvalidConfig}, args...)...)
}

// WithDefaults returns c with its zero fields set to their defaults:
// Parts [PartAll], Logger slog.Default(). It checks nothing; see
// [Config.Validate].
func (c Config) WithDefaults() Config {
	if c.Parts == 0 {
		c.Parts = PartAll
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Heartbeat = c.Heartbeat.WithDefaults()
	return c
}

// Validate checks a config that went through [Config.WithDefaults]. Its
// errors wrap [txmsg.ErrInvalidConfig] and name the field. The RocketMQ
// client config is checked by the parts that use it, when the stack is
// built.
func (c Config) Validate() error {
	if c.Parts == 0 || c.Parts&^PartAll != 0 {
		return invalid("Parts %d is not a combination of PartProducer and PartBackground", uint8(c.Parts))
	}
	for _, t := range c.Topics {
		if err := txmsg.ValidateTopic(t); err != nil {
			return fmt.Errorf("%w: stack: Topics: %w", txmsg.ErrInvalidConfig, err)
		}
	}
	if c.Logger == nil {
		return invalid("Logger is nil; call WithDefaults first")
	}
	if !zeroConn(c.Reconciler.Conn) || len(c.Reconciler.Hooks) > 0 {
		return invalid("Reconciler.Conn and Hooks must be left zero: the reconciler takes RocketMQ and Hooks")
	}
	return c.Heartbeat.ValidateIn("stack")
}

// reconciler is the reconciler's config, with the stack's settings.
func (c *Config) reconciler() txrmq.ReconcilerConfig {
	rc := c.Reconciler
	rc.Conn = c.rocketMQ()
	rc.Hooks = c.Hooks
	return rc
}

// WithDefaults returns c with its zero fields set to their defaults:
// those of [Config.WithDefaults] and [checker.Config.WithDefaults], the
// checker's Logger from Config.Logger, Checker.KeepMessages on with
// Reconcile, and Sweeper.Group from the producer group. It checks nothing; see [TransactionalConfig.Validate].
func (c TransactionalConfig) WithDefaults() TransactionalConfig {
	c.Config = c.Config.WithDefaults()
	if c.Checker.Logger == nil {
		c.Checker.Logger = c.Logger
	}
	if c.Reconcile {
		c.Checker.KeepMessages = true
	}
	c.Checker = c.Checker.WithDefaults()
	if c.Sweeper.Group == "" && c.Group != "" {
		c.Sweeper.Group = c.Group + SweeperSuffix
	}
	if c.Forwarder.Group == "" && c.Group != "" {
		c.Forwarder.Group = c.Group + ForwarderSuffix
	}
	if c.Producer.DelayTopic == "" {
		c.Producer.DelayTopic = txrmq.DefaultDelayTopic
	}
	if c.Forwarder.Topic == "" {
		c.Forwarder.Topic = c.Producer.DelayTopic
	}
	return c
}

// Validate checks a config that went through
// [TransactionalConfig.WithDefaults]. Its errors wrap
// [txmsg.ErrInvalidConfig] and name the field. The parts check their own
// settings when the stack is built.
func (c TransactionalConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if err := c.Checker.Validate(); err != nil {
		return fmt.Errorf("stack: Checker: %w", err)
	}
	if !zeroConn(c.Producer.Conn) || c.Producer.Group != "" || len(c.Producer.Hooks) > 0 || len(c.Producer.Topics) > 0 || c.Producer.Heartbeat != (fleet.Config{}) {
		return invalid("Producer.Conn, Group, Hooks, Topics and Heartbeat must be left zero: the producer takes RocketMQ, Group, Hooks, Topics and Heartbeat")
	}
	if !zeroConn(c.Forwarder.Conn) || c.Forwarder.DB != nil || c.Forwarder.Heartbeat != (fleet.Config{}) {
		return invalid("Forwarder.Conn, DB and Heartbeat must be left zero: the forwarder takes RocketMQ, the service's database and Heartbeat")
	}
	if c.Forwarder.Topic != c.Producer.DelayTopic {
		return invalid("Forwarder.Topic %q differs from Producer.DelayTopic %q: the forwarder must read the topic the producer sends delayed messages to", c.Forwarder.Topic, c.Producer.DelayTopic)
	}
	if !zeroConn(c.Sweeper.Conn) || len(c.Sweeper.Hooks) > 0 || len(c.Sweeper.ProducerGroups) > 0 || c.Sweeper.Heartbeat != (fleet.Config{}) {
		return invalid("Sweeper.Conn, Hooks, ProducerGroups and Heartbeat must be left zero: the sweeper takes RocketMQ, Hooks, Heartbeat and the producer group")
	}
	if c.Parts&PartBackground != 0 {
		if c.Group == "" {
			return invalid("Group is empty: the producer group is required")
		}
		if c.Sweeper.Group == c.Group {
			return invalid("Sweeper.Group %q is the producer group: the broker would send check-backs to the sweeper's publisher, which cannot answer them", c.Sweeper.Group)
		}
		if c.Forwarder.Group == c.Group || c.Forwarder.Group == c.Sweeper.Group {
			return invalid("Forwarder.Group %q must differ from the producer and sweeper groups", c.Forwarder.Group)
		}
	}
	return nil
}

// WithDefaults returns c with its zero fields set to their defaults:
// those of [Config.WithDefaults], [outbox.Config.WithDefaults] and
// [outbox.RelayConfig.WithDefaults], Relays 1, Outbox.MaxBodySize from
// Publisher.MaxBodySize and the parts' Logger from Config.Logger. It
// checks nothing; see [OutboxConfig.Validate].
func (c OutboxConfig) WithDefaults() OutboxConfig {
	c.Config = c.Config.WithDefaults()
	if c.Relays == 0 {
		c.Relays = 1
	}
	if c.Outbox.MaxBodySize == 0 {
		c.Outbox.MaxBodySize = c.Publisher.MaxBodySize
	}
	if c.Outbox.Logger == nil {
		c.Outbox.Logger = c.Logger
	}
	if c.Relay.Logger == nil {
		c.Relay.Logger = c.Logger
	}
	c.Outbox = c.Outbox.WithDefaults()
	c.Relay = c.Relay.WithDefaults()
	return c
}

// Validate checks a config that went through [OutboxConfig.WithDefaults].
// Its errors wrap [txmsg.ErrInvalidConfig] and name the field. The
// publisher checks its own settings when the stack is built.
func (c OutboxConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if len(c.Outbox.Hooks) > 0 || len(c.Relay.Hooks) > 0 {
		return invalid("Outbox.Hooks, Relay.Hooks: set Hooks on stack.Config, not on Outbox or Relay: the stack hands them to every part")
	}
	if c.Relays <= 0 {
		return invalid("Relays %d must be positive", c.Relays)
	}
	if err := c.Outbox.Validate(); err != nil {
		return fmt.Errorf("stack: Outbox: %w", err)
	}
	if err := c.Relay.Validate(); err != nil {
		return fmt.Errorf("stack: Relay: %w", err)
	}
	if !zeroConn(c.Publisher.Conn) || c.Publisher.Group != "" || len(c.Publisher.Hooks) > 0 || len(c.Publisher.Topics) > 0 {
		return invalid("Publisher.Conn, Group, Hooks and Topics must be left zero: the relays' publisher takes RocketMQ, Group, Hooks and Topics")
	}
	return nil
}

// zeroConn reports whether a part's connection settings were left zero.
func zeroConn(c txrmq.Conn) bool {
	return reflect.DeepEqual(c, txrmq.Conn{})
}

// rocketMQ is the parts' connection to the cluster.
func (c *Config) rocketMQ() txrmq.Conn {
	rc := c.RocketMQ
	if rc.Logger == nil {
		rc.Logger = c.Logger
	}
	return rc
}

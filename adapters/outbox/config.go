package outbox

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// DefaultBuckets is the default number of buckets ([Config.Buckets]):
// relays lease buckets, so at most this many relays of a table publish at
// once.
const DefaultBuckets = 16

// Defaults of [RelayConfig]'s fields.
const (
	DefaultBatchSize      = 500
	DefaultPollInterval   = time.Second
	DefaultPublishTimeout = 30 * time.Second
	DefaultClaimBytes     = 16 << 20
	DefaultPublishBytes   = 4 << 20
	DefaultMaxAttempts    = 20
	DefaultMinBackoff     = time.Second
	DefaultMaxBackoff     = 5 * time.Minute
	DefaultMaxWaitBackoff = 5 * time.Second
	DefaultRetention      = 24 * time.Hour
	DefaultPurgeInterval  = time.Minute
	DefaultPurgeBatch     = store.DefaultPurgeBatch
	DefaultLeaseTTL       = 10 * time.Second
	DefaultSettleDelay    = 100 * time.Millisecond
	DefaultMaxLag         = 5 * time.Minute
)

// handOverTTLs is RelayConfig.HandOverAfter's default in lease TTLs.
const handOverTTLs = 3

// maxBuckets keeps the lease table small enough to read whole each round.
const maxBuckets = 1024

// Config configures an [Outbox]. The zero value is usable.
type Config struct {
	// Table is the outbox table. Default [DefaultTable]. It must be a plain
	// SQL identifier short enough to take the "_lease" and "_relay"
	// suffixes of the relays' tables.
	Table string
	// MaxBodySize is the largest body accepted; it should equal the broker's
	// maxMessageSize. Default [txmsg.DefaultMaxBodySize] (4 MiB).
	MaxBodySize int
	// Buckets is how many buckets rows are spread over when inserted: a
	// hash of the sharding key, or a random bucket for rows without one.
	// Relays lease buckets, so at most Buckets relays publish at once.
	// Default [DefaultBuckets]; at most 1024. The relays of the Outbox
	// use the same number. Every process writing or relaying a table must
	// agree on it; change it only while the outbox holds no pending rows
	// with a sharding key.
	//
	// Ordered or not, relays share a table's rows through bucket leases:
	// each relay claims only from the buckets it holds, its share of
	// Buckets / relays or one more, so relays added do not slow one another
	// down; relays beyond Buckets hold none and stand by. The relays count
	// one another through the relay table, "<Table>_relay", which each
	// writes every lease round; after relays join or leave, the spread is
	// even again within a few lease rounds. Rows without a
	// sharding key are spread over the buckets at random; the rows of one
	// sharding key all sit in one bucket, so one hot key is drained by one
	// relay at a time.
	Buckets int
	// Logger receives the outbox's logs; nil means slog.Default().
	Logger *slog.Logger
	// Hooks observe Transact (txmsg.HookBeforeSend, txmsg.HookInvalidSend,
	// txmsg.HookLocalDone).
	// A hook that implements no hook interface is refused. Optional.
	Hooks txmsg.Hooks
}

func validTable(what, table string) error {
	if !store.ValidIdent(table) || !store.ValidIdent(table+leaseSuffix) || !store.ValidIdent(table+relaySuffix) {
		return fmt.Errorf("%w: %s: table name %q must be a plain SQL identifier of at most %d characters",
			txmsg.ErrInvalidConfig, what, table, 64-len(leaseSuffix))
	}
	return nil
}

// WithDefaults returns c with its zero fields set to their defaults:
// Table [DefaultTable], MaxBodySize [txmsg.DefaultMaxBodySize], Buckets
// [DefaultBuckets], Logger slog.Default(). It checks nothing; see
// [Config.Validate].
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	setDefault(&c.MaxBodySize, txmsg.DefaultMaxBodySize)
	setDefault(&c.Buckets, DefaultBuckets)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks a config that went through [Config.WithDefaults]: a
// zero field that has a default is refused. Its errors wrap
// [txmsg.ErrInvalidConfig] and name the field.
func (c Config) Validate() error {
	if err := validTable("outbox: Table", c.Table); err != nil {
		return err
	}
	if c.MaxBodySize <= 0 {
		return fmt.Errorf("%w: outbox: MaxBodySize %d must be positive", txmsg.ErrInvalidConfig, c.MaxBodySize)
	}
	if c.Buckets <= 0 || c.Buckets > maxBuckets {
		return fmt.Errorf("%w: outbox: Buckets %d must be 1 to %d", txmsg.ErrInvalidConfig, c.Buckets, maxBuckets)
	}
	if c.Logger == nil {
		return fmt.Errorf("%w: outbox: Logger is nil; call WithDefaults first", txmsg.ErrInvalidConfig)
	}
	if _, err := driver.BindHooks(c.Hooks, c.Logger); err != nil {
		return fmt.Errorf("%w: outbox: Hooks: %w", txmsg.ErrInvalidConfig, err)
	}
	return nil
}

// RelayConfig configures a [Relay]. The zero value is usable. A relay
// takes its table and its number of buckets from the [Outbox] it relays
// ([Config.Table], [Config.Buckets]).
type RelayConfig struct {
	// Name identifies this relay in leases and logs. Default
	// "<hostname>-<pid>-<random>"; it must be unique among the relays of
	// one table.
	Name string
	// BatchSize is the most rows claimed per transaction. Default
	// [DefaultBatchSize] (500): each
	// claim costs a few statements, so larger batches drain faster. An
	// ordered relay reads up to three windows of BatchSize rows per bucket,
	// the later ones skipping the keys of the first, so that one key's
	// backlog cannot starve the others.
	BatchSize int
	// PollInterval is how often the relay looks for rows committed by other
	// processes. Default [DefaultPollInterval] (1 s).
	PollInterval time.Duration
	// PublishTimeout bounds one Publish call. Cancelling Run's context does
	// not cut a publish short: the in-flight batch finishes (within this
	// bound) and is marked, so shutdown causes no needless duplicates.
	// Default [DefaultPublishTimeout] (30 s).
	PublishTimeout time.Duration
	// ClaimBytes bounds the message bodies one claim loads: a claim reads
	// its rows without bodies and loads them as it publishes, up to this
	// many bytes; rows beyond stay pending for the next claim. A claim
	// always takes at least one row, so it holds at most
	// max(ClaimBytes, the largest body) of bodies. Default
	// [DefaultClaimBytes] (16 MiB).
	ClaimBytes int
	// PublishBytes bounds the bodies of one Publish call; a row larger
	// than it goes alone. Default [DefaultPublishBytes] (4 MiB, the
	// broker's default maxMessageSize).
	PublishBytes int
	// MaxAttempts is how many times the broker may refuse a row before it
	// is parked. Default [DefaultMaxAttempts] (20); negative means rows are retried forever. Only
	// failures of the message count (the publisher's error wraps
	// txmsg.ErrRejected or txmsg.ErrInvalidMessage, or the publisher
	// panicked, or the message failed while others of the same call went
	// through). Failures of the broker or the route (txmsg.IsUnavailable,
	// or every message of the call failing the same unclassified way)
	// never count: the rows wait for the broker however long it stays
	// away, backing off up to MaxWaitBackoff, and Stats.Waiting,
	// Relay.Health and txmsg.HookRelayUnavailable show it.
	MaxAttempts int
	// MinBackoff is the delay after a row's first failure; each further
	// failure doubles it, up to MaxBackoff, with jitter (the delay is drawn
	// from [d/2, d]). While the broker is unavailable the delay of the rows
	// that wait for it grows the same way with the relay's count of cycles
	// that failed in a row, up to MaxWaitBackoff.
	// Default [DefaultMinBackoff] (1 s).
	MinBackoff time.Duration
	// MaxBackoff caps the delay between attempts of a row the broker
	// refused. Default [DefaultMaxBackoff] (5 min): with the
	// default MinBackoff and MaxAttempts a row the broker keeps refusing
	// is retried for about an hour before it is parked.
	MaxBackoff time.Duration
	// MaxWaitBackoff caps the delay between attempts of a row that waits
	// for an unavailable broker, so that such rows go out within about
	// MaxWaitBackoff of the broker's return however long it was away.
	// The relay's load during an outage stays bounded all the same: a
	// cycle that published nothing is never followed at once by another;
	// the relay waits for the PollInterval, a nudge of its Outbox or the
	// next row to come due, and claims at most BatchSize rows a cycle.
	//
	// A relay also retries the waiting rows of its buckets at once (it
	// makes them due now) when it publishes again after an outage, and
	// when its Publisher implements [txmsg.BrokerReturnNotifier] (as
	// txrmq.Publisher does) and signals that a broker came back.
	//
	// Default [DefaultMaxWaitBackoff] (5 s), raised to MinBackoff and
	// lowered to MaxBackoff when they exclude it; a value set must lie
	// between MinBackoff and MaxBackoff.
	MaxWaitBackoff time.Duration
	// Retention is how long sent rows are kept before the relay purges them.
	// Default [DefaultRetention] (24 h); negative means never.
	Retention time.Duration
	// PurgeInterval is how often the relay purges sent rows older than
	// Retention. Default [DefaultPurgeInterval] (1 min).
	PurgeInterval time.Duration
	// PurgeBatch is the most rows deleted per statement. Default
	// [DefaultPurgeBatch] (1000).
	PurgeBatch int

	// Ordered publishes the rows of each sharding key in id order, which
	// for one key is commit order, even with several relays. Rows without
	// a sharding key are published in no particular order. Every relay of a
	// table must agree on Ordered (and on the Outbox's Buckets); an unordered relay on the
	// same table would overtake.
	//
	// A row that fails holds back the later rows of its key until it is
	// published or parked; other keys go on.
	//
	// A row waiting for an unavailable broker is never parked, so it holds
	// back the later rows of its key until the broker takes it.
	//
	// Limits: a row that is parked stops holding back later rows of its
	// key, so they are published without it, and a requeued parked row comes
	// after them. A relay works through its buckets one at a time and waits
	// on a bucket while a writer's transaction holds an uncommitted outbox
	// row in it: with Transact the row is inserted just before COMMIT; with
	// EnqueueTx, commit soon after the call. Publishing goes round by round,
	// at most one message per key per Publish call, so a hot key publishes
	// one message per broker round trip. One claim of a bucket runs at most
	// 64 rounds, BatchSize rows and ClaimBytes of bodies, starts no round
	// after min(PublishTimeout, LeaseTTL/2) and none once its lease of the
	// bucket has less than LeaseTTL/4 left; the rest waits for the next
	// claim, so a hot key's backlog never keeps one transaction open.
	Ordered bool
	// LeaseTTL is how long a relay owns a bucket without renewing, and
	// how long a relay counts as live after its last lease round; a
	// crashed relay's buckets move to others after it (a relay that stops
	// releases its buckets and deregisters at once). A lease round runs
	// every LeaseTTL/3: it renews the leases, gives up buckets above the
	// relay's share and takes free ones up to it. Every relay of a table
	// should use the same LeaseTTL. Default [DefaultLeaseTTL] (10 s).
	LeaseTTL time.Duration
	// HandOverAfter is how long a relay's publishes may keep failing
	// because the broker or the route is unavailable (see MaxAttempts)
	// before it hands its buckets to the other relays of the table: a
	// relay that reaches the database but not the broker would otherwise
	// renew its leases and hold its share of the rows, and its keys, for
	// the whole outage while other relays could publish them. It releases
	// its buckets and deregisters (only while another relay is live; a
	// relay alone keeps its buckets), and Health reports it. It joins the
	// lease rounds again after HandOverAfter, or at once when its
	// Publisher signals a broker's return ([txmsg.BrokerReturnNotifier]),
	// and takes buckets again; if its first publishes still fail, it
	// hands them over again at once. When every relay of a table is cut
	// off, they thus take turns holding the buckets. Default 3 × LeaseTTL;
	// negative means never.
	HandOverAfter time.Duration
	// SettleDelay is how old a keyed row must be before an ordered relay
	// publishes it. It covers the moment between a row's id being assigned
	// and the row appearing in the index. The row's age is measured by the
	// database's clock, as it was written, so the clocks of writers and
	// relays do not matter. Default [DefaultSettleDelay] (100 ms).
	SettleDelay time.Duration

	// MaxLag is the age of the oldest pending row above which
	// [Relay.Health] reports [ErrLagging]. Default [DefaultMaxLag] (5 min);
	// negative turns the lag check off.
	MaxLag time.Duration

	// Logger receives the relay's logs; nil means slog.Default().
	Logger *slog.Logger
	// Hooks observe published batches (txmsg.HookRelayBatch). A hook that
	// implements no hook interface is refused. Optional.
	Hooks txmsg.Hooks
}

// WithDefaults returns c with its zero fields set to their defaults
// (see each field), Name to "<hostname>-<pid>-<random>" and Logger to
// slog.Default(). It checks nothing; see [RelayConfig.Validate].
func (c RelayConfig) WithDefaults() RelayConfig {
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), txmsg.NewID()[24:])
	}
	setDefault(&c.BatchSize, DefaultBatchSize)
	setDefault(&c.PollInterval, DefaultPollInterval)
	setDefault(&c.PublishTimeout, DefaultPublishTimeout)
	setDefault(&c.ClaimBytes, DefaultClaimBytes)
	setDefault(&c.PublishBytes, DefaultPublishBytes)
	setDefault(&c.MaxAttempts, DefaultMaxAttempts)
	setDefault(&c.MinBackoff, DefaultMinBackoff)
	setDefault(&c.MaxBackoff, DefaultMaxBackoff)
	if c.MaxWaitBackoff == 0 {
		c.MaxWaitBackoff = min(max(DefaultMaxWaitBackoff, c.MinBackoff), c.MaxBackoff)
	}
	setDefault(&c.Retention, DefaultRetention)
	setDefault(&c.PurgeInterval, DefaultPurgeInterval)
	setDefault(&c.PurgeBatch, DefaultPurgeBatch)
	setDefault(&c.LeaseTTL, DefaultLeaseTTL)
	setDefault(&c.HandOverAfter, handOverTTLs*c.LeaseTTL)
	setDefault(&c.SettleDelay, DefaultSettleDelay)
	setDefault(&c.MaxLag, DefaultMaxLag)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks a config that went through [RelayConfig.WithDefaults]:
// a zero field that has a default is refused. Its errors wrap
// [txmsg.ErrInvalidConfig] and name the field.
func (c RelayConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: relay: "+format, append([]any{txmsg.ErrInvalidConfig}, args...)...)
	}
	if c.Name == "" || len(c.Name) > 255 {
		return bad("Name %q must be 1 to 255 bytes", c.Name)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"BatchSize", c.BatchSize}, {"ClaimBytes", c.ClaimBytes}, {"PublishBytes", c.PublishBytes}, {"PurgeBatch", c.PurgeBatch}} {
		if f.v <= 0 {
			return bad("%s %d must be positive", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"PollInterval", c.PollInterval}, {"PublishTimeout", c.PublishTimeout}, {"MinBackoff", c.MinBackoff},
		{"MaxBackoff", c.MaxBackoff}, {"MaxWaitBackoff", c.MaxWaitBackoff}, {"PurgeInterval", c.PurgeInterval},
		{"LeaseTTL", c.LeaseTTL}, {"SettleDelay", c.SettleDelay}} {
		if f.v <= 0 {
			return bad("%s %v must be positive", f.name, f.v)
		}
	}
	if c.MaxAttempts == 0 {
		return bad("MaxAttempts is 0: set it, or a negative value to retry forever")
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Retention", c.Retention}, {"HandOverAfter", c.HandOverAfter}, {"MaxLag", c.MaxLag}} {
		if f.v == 0 {
			return bad("%s is 0: set it, or a negative value for never", f.name)
		}
	}
	if c.MaxBackoff < c.MinBackoff {
		return bad("MaxBackoff %v is below MinBackoff %v", c.MaxBackoff, c.MinBackoff)
	}
	if c.MaxWaitBackoff < c.MinBackoff || c.MaxWaitBackoff > c.MaxBackoff {
		return bad("MaxWaitBackoff %v must lie between MinBackoff %v and MaxBackoff %v", c.MaxWaitBackoff, c.MinBackoff, c.MaxBackoff)
	}
	if c.Logger == nil {
		return bad("Logger is nil; call WithDefaults first")
	}
	if _, err := driver.BindHooks(c.Hooks, c.Logger); err != nil {
		return bad("Hooks: %w", err)
	}
	return nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

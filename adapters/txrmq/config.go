package txrmq

import (
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/txmsg"
)

// Defaults of [Config]'s fields.
const (
	// DefaultSendTimeout is Config.SendTimeout's default.
	DefaultSendTimeout = 3 * time.Second
	// DefaultRetries is Config.Retries's default.
	DefaultRetries = 2
	// DefaultClientLogLevel is Config.ClientLogLevel's default.
	DefaultClientLogLevel = slog.LevelError
	// DefaultNameServerTimeout is Config.NameServerTimeout's default.
	DefaultNameServerTimeout = 3 * time.Second
)

// Config is what every txmsg RocketMQ component needs to reach the cluster.
// Component-specific settings live in their own config types, which embed
// Config.
type Config struct {
	// NameServers are the name server addresses, host:port. Required.
	NameServers []string
	// Group is the producer or consumer group. Required. All producers of a
	// transactional group must answer check-backs from the same database.
	Group string
	// Namespace, when set, is prefixed to topics and groups by the client
	// (RocketMQ 4.x namespaces, e.g. on hosted clusters).
	Namespace string
	// AccessKey and SecretKey are ACL credentials; both or neither.
	AccessKey string
	SecretKey string
	// SecurityToken is an optional STS token, used with AccessKey.
	SecurityToken string
	// TLS turns on TLS to the name servers and brokers. Note: the client
	// stores this flag process-wide, so every RocketMQ client in one
	// process must agree on it.
	TLS bool
	// SendTimeout bounds one send to the broker. Default
	// [DefaultSendTimeout] (3 s).
	SendTimeout time.Duration
	// Retries is how many times the client retries a failed plain send.
	// Default [DefaultRetries] (2).
	Retries int
	// NameServerTimeout bounds how long Start waits for one name server
	// to answer (connect and reply) before it tries the next one. Start
	// asks the name servers before it starts the client, so a name server
	// that is down, or accepts connections and never answers, costs Start
	// at most this long per name server (or until the caller's context
	// ends), and the error names each address and what went wrong.
	// Default [DefaultNameServerTimeout] (3 s).
	NameServerTimeout time.Duration
	// MaxBodySize is the largest body accepted; it should equal the
	// broker's maxMessageSize. Default [txmsg.DefaultMaxBodySize] (4 MiB).
	MaxBodySize int
	// Logger receives txmsg's logs and, at warning level and above, the
	// client's. Nil means slog.Default().
	Logger *slog.Logger
	// ClientLogLevel is the lowest level of rocketmq-client-go's own logs
	// passed to Logger, for example slog.LevelWarn. Nil means
	// [DefaultClientLogLevel]: the client logs routine events (rebalances,
	// missing retry topics) as warnings.
	//
	// The client's logger is process-wide (see package rmqlog): the first
	// RocketMQ component built in a process, or an earlier rmqlog.Install,
	// decides where the client's logs go and from which level. A component
	// built later with another Logger or ClientLogLevel logs a warning
	// saying that its setting does not apply to them.
	ClientLogLevel slog.Leveler
	// Hooks observe the component's events (see txmsg.Hook). A
	// Transactional calls BeforeSend, OnHalfSent, OnLocalDone and
	// OnCheckBack; a Publisher calls OnCheckBack for the check-backs that
	// reach it; a Sweeper calls OnHeld for the half messages it parks for
	// an operator. A Consumer's events go on its Inbox
	// (txmsg.InboxConfig.Hooks), so NewConsumer refuses a non-empty Hooks
	// with txmsg.ErrInvalidConfig. A hook that implements no hook interface
	// is refused too. Optional.
	Hooks txmsg.Hooks
}

var groupPattern = regexp.MustCompile(`^[%|a-zA-Z0-9_-]{1,255}$`)

func (c *Config) validate(what string) error {
	if len(c.NameServers) == 0 {
		return fmt.Errorf("%w: %s: NameServers is empty", txmsg.ErrInvalidConfig, what)
	}
	for _, ns := range c.NameServers {
		host, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(ns, "http://"), "https://"))
		if err != nil || host == "" {
			return fmt.Errorf("%w: %s: name server %q is not host:port", txmsg.ErrInvalidConfig, what, ns)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return fmt.Errorf("%w: %s: name server %q has a bad port", txmsg.ErrInvalidConfig, what, ns)
		}
	}
	if !groupPattern.MatchString(c.Group) {
		return fmt.Errorf("%w: %s: Group %q must be 1 to 255 characters from [a-zA-Z0-9_-%%|]", txmsg.ErrInvalidConfig, what, c.Group)
	}
	if c.Namespace != "" && !groupPattern.MatchString(c.Namespace) {
		return fmt.Errorf("%w: %s: Namespace %q must contain only [a-zA-Z0-9_-%%|]", txmsg.ErrInvalidConfig, what, c.Namespace)
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return fmt.Errorf("%w: %s: AccessKey and SecretKey must be set together", txmsg.ErrInvalidConfig, what)
	}
	if c.SecurityToken != "" && c.AccessKey == "" {
		return fmt.Errorf("%w: %s: SecurityToken needs AccessKey and SecretKey", txmsg.ErrInvalidConfig, what)
	}
	if c.SendTimeout < 0 || c.Retries < 0 || c.MaxBodySize < 0 {
		return fmt.Errorf("%w: %s: SendTimeout, Retries and MaxBodySize must not be negative", txmsg.ErrInvalidConfig, what)
	}
	if c.NameServerTimeout < 0 {
		return fmt.Errorf("%w: %s: NameServerTimeout must not be negative (0 means %s)", txmsg.ErrInvalidConfig, what, DefaultNameServerTimeout)
	}
	if c.NameServerTimeout == 0 {
		c.NameServerTimeout = DefaultNameServerTimeout
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	if c.MaxBodySize == 0 {
		c.MaxBodySize = txmsg.DefaultMaxBodySize
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ClientLogLevel == nil {
		c.ClientLogLevel = DefaultClientLogLevel
	}
	return nil
}

// noHooks refuses Hooks on a component that would ignore them; where
// says where its events' hooks go instead.
func (c *Config) noHooks(what, where string) error {
	if len(c.Hooks) > 0 {
		return fmt.Errorf("%w: %s: Hooks are not called here; %s", txmsg.ErrInvalidConfig, what, where)
	}
	return nil
}

func (c *Config) credentials() primitive.Credentials {
	return primitive.Credentials{AccessKey: c.AccessKey, SecretKey: c.SecretKey, SecurityToken: c.SecurityToken}
}

// LogValue implements slog.LogValuer: the config without its
// credentials, whichever handler formats it.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name_servers", strings.Join(c.NameServers, ",")),
		slog.String("group", c.Group),
		slog.String("namespace", c.Namespace),
		slog.Bool("acl", c.AccessKey != ""),
		slog.Bool("tls", c.TLS),
	)
}

// GoString is String, so that %#v does not print the credentials either.
func (c Config) GoString() string { return c.String() }

// String describes the config without its secrets.
func (c Config) String() string {
	ak := ""
	if c.AccessKey != "" {
		ak = ", access key " + redact(c.AccessKey)
	}
	return fmt.Sprintf("rocketmq{name servers %v, group %q, namespace %q%s}", c.NameServers, c.Group, c.Namespace, ak)
}

func redact(s string) string {
	if len(s) <= 4 {
		return "****"
	}
	return s[:2] + "****"
}

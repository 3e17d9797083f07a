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
	// SendTimeout bounds one send to the broker. Default 3 s.
	SendTimeout time.Duration
	// Retries is how many times the client retries a failed plain send.
	// Default 2.
	Retries int
	// MaxBodySize is the largest body accepted; it should equal the
	// broker's maxMessageSize. Default txmsg.DefaultMaxBodySize (4 MiB).
	MaxBodySize int
	// Logger receives txmsg's logs and, at warning level and above, the
	// client's. Nil means slog.Default().
	Logger *slog.Logger
	// ClientLogLevel is the lowest level of rocketmq-client-go's own logs
	// passed to Logger. Default slog.LevelError: the client logs routine
	// events (rebalances, missing retry topics) as warnings.
	ClientLogLevel slog.Level
	// ClientLogLevelSet marks ClientLogLevel as set, so that
	// slog.LevelInfo (the zero value) can be chosen.
	ClientLogLevelSet bool
	// Hooks observe the component's events (see txmsg.Hook): half sends,
	// local outcomes and check-backs for the transactional producer.
	// Consumers take their hooks from the Inbox. Optional.
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
	if c.SendTimeout == 0 {
		c.SendTimeout = 3 * time.Second
	}
	if c.Retries == 0 {
		c.Retries = 2
	}
	if c.MaxBodySize == 0 {
		c.MaxBodySize = txmsg.DefaultMaxBodySize
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if !c.ClientLogLevelSet {
		c.ClientLogLevel = slog.LevelError
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

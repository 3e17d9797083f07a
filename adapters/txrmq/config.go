package txrmq

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/txmsg"
)

// Defaults of the config fields every component shares.
const (
	// DefaultSendTimeout is the default SendTimeout of
	// [TransactionalConfig] and [PublisherConfig].
	DefaultSendTimeout = 3 * time.Second
	// DefaultRetries is the default Retries of [TransactionalConfig] and
	// [PublisherConfig].
	DefaultRetries = 2
	// DefaultClientLogLevel is Conn.ClientLogLevel's default.
	DefaultClientLogLevel = slog.LevelError
	// DefaultNameServerTimeout is Conn.NameServerTimeout's default.
	DefaultNameServerTimeout = 3 * time.Second
)

// Conn is how a txmsg RocketMQ component reaches the cluster: every
// component's config embeds it. The group and the component's own
// settings live in the component's config.
//
// Like every config of the package, Conn has WithDefaults, which fills
// the zero fields with their defaults, and Validate, which checks a
// defaulted value; the constructors call both.
type Conn struct {
	// NameServers are the name server addresses, host:port. Required.
	NameServers []string
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
	// NameServerTimeout bounds how long Start waits for one name server
	// to answer (connect and reply) before it tries the next one. Start
	// asks the name servers before it starts the client, so a name server
	// that is down, or accepts connections and never answers, costs Start
	// at most this long per name server (or until the caller's context
	// ends), and the error names each address and what went wrong.
	// Default [DefaultNameServerTimeout] (3 s).
	NameServerTimeout time.Duration
	// Logger receives txmsg's logs and, at warning level and above, the
	// client's. Default slog.Default().
	Logger *slog.Logger
	// ClientLogLevel is the lowest level of rocketmq-client-go's own logs
	// passed to Logger, for example slog.LevelWarn. Default
	// [DefaultClientLogLevel]: the client logs routine events (rebalances,
	// missing retry topics) as warnings.
	//
	// The client's logger is process-wide (see package rmqlog): the first
	// RocketMQ component built in a process, or an earlier rmqlog.Install,
	// decides where the client's logs go and from which level. A component
	// built later with another Logger or ClientLogLevel logs a warning
	// saying that its setting does not apply to them.
	ClientLogLevel slog.Leveler
}

// WithDefaults returns c with its zero fields set to their defaults. It
// checks nothing.
func (c Conn) WithDefaults() Conn {
	if c.NameServerTimeout == 0 {
		c.NameServerTimeout = DefaultNameServerTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ClientLogLevel == nil {
		c.ClientLogLevel = DefaultClientLogLevel
	}
	return c
}

// Validate checks c, which WithDefaults has filled in. The error wraps
// [txmsg.ErrInvalidConfig] and names the field.
func (c Conn) Validate() error { return c.validate("rocketmq connection") }

var groupPattern = regexp.MustCompile(`^[%|a-zA-Z0-9_-]{1,255}$`)

// validate is Validate with what, the component, in front of the error.
func (c *Conn) validate(what string) error {
	if len(c.NameServers) == 0 {
		return fmt.Errorf("%w: %s: NameServers is empty", txmsg.ErrInvalidConfig, what)
	}
	for _, ns := range c.NameServers {
		host, port, err := net.SplitHostPort(nameServerAddr(ns))
		if err != nil || host == "" {
			return fmt.Errorf("%w: %s: NameServers: %q is not host:port", txmsg.ErrInvalidConfig, what, ns)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return fmt.Errorf("%w: %s: NameServers: %q has a bad port", txmsg.ErrInvalidConfig, what, ns)
		}
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
	if c.NameServerTimeout <= 0 {
		return fmt.Errorf("%w: %s: NameServerTimeout must be positive (0 means %s)", txmsg.ErrInvalidConfig, what, DefaultNameServerTimeout)
	}
	if c.Logger == nil || c.ClientLogLevel == nil {
		return fmt.Errorf("%w: %s: Logger and ClientLogLevel are nil; call WithDefaults before Validate", txmsg.ErrInvalidConfig, what)
	}
	return nil
}

// validateGroup checks a component's Group.
func validateGroup(what, group string) error {
	if !groupPattern.MatchString(group) {
		return fmt.Errorf("%w: %s: Group %q must be 1 to 255 characters from [a-zA-Z0-9_-%%|]", txmsg.ErrInvalidConfig, what, group)
	}
	return nil
}

// sendDefaults returns a producer-side config's SendTimeout, Retries
// and MaxBodySize with the zero ones set to their defaults.
func sendDefaults(timeout time.Duration, retries, maxBody int) (time.Duration, int, int) {
	if timeout == 0 {
		timeout = DefaultSendTimeout
	}
	if retries == 0 {
		retries = DefaultRetries
	}
	if maxBody == 0 {
		maxBody = txmsg.DefaultMaxBodySize
	}
	return timeout, retries, maxBody
}

// validateSend checks a producer-side config's defaulted SendTimeout,
// Retries and MaxBodySize.
func validateSend(what string, timeout time.Duration, retries, maxBody int) error {
	switch {
	case timeout <= 0:
		return fmt.Errorf("%w: %s: SendTimeout must be positive (0 means %s)", txmsg.ErrInvalidConfig, what, DefaultSendTimeout)
	case retries < 0:
		return fmt.Errorf("%w: %s: Retries must not be negative (0 means %d)", txmsg.ErrInvalidConfig, what, DefaultRetries)
	case maxBody <= 0:
		return fmt.Errorf("%w: %s: MaxBodySize must be positive (0 means %d)", txmsg.ErrInvalidConfig, what, txmsg.DefaultMaxBodySize)
	}
	return nil
}

// validateClient checks what every component's config has: its
// connection settings and its group.
func validateClient(what string, c *Conn, group string) error {
	if err := c.validate(what); err != nil {
		return err
	}
	return validateGroup(what, group)
}

// validateProducer checks what the producer-side configs share, defaulted:
// SendTimeout, Retries, MaxBodySize, Hooks and Topics.
func validateProducer(what string, timeout time.Duration, retries, maxBody int, hooks txmsg.Hooks, topics []string) error {
	if err := validateSend(what, timeout, retries, maxBody); err != nil {
		return err
	}
	if err := validateHooks(what, hooks); err != nil {
		return err
	}
	for _, t := range topics {
		if err := txmsg.ValidateTopic(t); err != nil {
			return fmt.Errorf("%w: %s: Topics: %w", txmsg.ErrInvalidConfig, what, err)
		}
	}
	return nil
}

// consumeDefaults returns a consumer config's Concurrency and
// MaxReconsumeTimes with the zero ones set to their defaults.
func consumeDefaults(concurrency, maxReconsume int) (int, int) {
	if concurrency == 0 {
		concurrency = DefaultConcurrency
	}
	if maxReconsume == 0 {
		maxReconsume = DefaultMaxReconsumeTimes
	}
	return concurrency, maxReconsume
}

// validateConsume checks a consumer config's defaulted Concurrency and
// MaxReconsumeTimes.
func validateConsume(what string, concurrency, maxReconsume int) error {
	switch {
	case concurrency < 1 || concurrency > 1000:
		return fmt.Errorf("%w: %s: Concurrency must be between 1 and 1000 (0 means %d)", txmsg.ErrInvalidConfig, what, DefaultConcurrency)
	case maxReconsume < 1 || maxReconsume > math.MaxInt32:
		return fmt.Errorf("%w: %s: MaxReconsumeTimes must be positive (0 means %d)", txmsg.ErrInvalidConfig, what, DefaultMaxReconsumeTimes)
	}
	return nil
}

// validateHooks checks hooks as txmsg.Hooks.Bind would, without binding
// them.
func validateHooks(what string, hooks txmsg.Hooks) error {
	if err := hooks.Validate(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (c *Conn) credentials() primitive.Credentials {
	return primitive.Credentials{AccessKey: c.AccessKey, SecretKey: c.SecretKey, SecurityToken: c.SecurityToken}
}

// LogValue implements slog.LogValuer: the connection settings without
// the credentials, whichever handler formats them.
func (c Conn) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name_servers", strings.Join(c.NameServers, ",")),
		slog.String("namespace", c.Namespace),
		slog.Bool("acl", c.AccessKey != ""),
		slog.Bool("tls", c.TLS),
	)
}

// GoString is String, so that %#v does not print the credentials either.
func (c Conn) GoString() string { return c.String() }

// String describes the connection settings without their secrets.
func (c Conn) String() string {
	ak := ""
	if c.AccessKey != "" {
		ak = ", access key " + redact(c.AccessKey)
	}
	return fmt.Sprintf("rocketmq{name servers %v, namespace %q%s}", c.NameServers, c.Namespace, ak)
}

func redact(s string) string {
	if len(s) <= 4 {
		return "****"
	}
	return s[:2] + "****"
}

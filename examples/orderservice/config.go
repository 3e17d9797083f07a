package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/txmsg"
)

// Delivery modes, chosen with -mode. They differ only in the wire provider
// set that builds the txmsg.Transactor (see providers.go).
const (
	ModeTransactional = "transactional"
	ModeOutbox        = "outbox"
)

// Config is the service's configuration. ParseConfig fills it from flags
// and environment variables; a flag given on the command line wins over
// its variable.
type Config struct {
	// Mode is ModeTransactional (half messages and a barrier table; needs a
	// broker with transactional messages) or ModeOutbox (outbox table and
	// relay).
	Mode string
	// HTTPAddr is where the JSON API listens.
	HTTPAddr string
	// DSN is the MySQL/MariaDB data source name.
	DSN string
	// NameServers are the RocketMQ name servers.
	NameServers []string
	// Namespace is the optional RocketMQ namespace.
	Namespace string
	// Topic carries the OrderCreated events.
	Topic string
	// ProducerGroup is the producer group: in transactional mode the broker
	// sends its check-backs to any live producer of this group.
	ProducerGroup string
	// ConsumerGroup is the inventory consumer's group; the inbox dedupes
	// per group.
	ConsumerGroup string
	// AccessKey and SecretKey are RocketMQ ACL credentials; both or
	// neither. They are never logged.
	AccessKey string
	SecretKey string
	// CreateTopicOn, when set, is a broker address on which the topic is
	// created at startup if it has no route yet. A convenience for
	// development brokers; production topics are made by operators.
	CreateTopicOn string
	// Seed inserts the demo inventory at startup; existing rows are kept.
	Seed bool
	// Reconcile runs the stack's reconciler (stack.Config.Reconcile): after
	// a failover or a master restart it publishes again the committed
	// events of the last ReconcileWindow that the brokers lost.
	Reconcile bool
	// ReconcileWindow is how far before such a change it looks; 0 means
	// txrmq.DefaultReconcileWindow.
	ReconcileWindow time.Duration
	// ShutdownTimeout bounds the graceful shutdown.
	ShutdownTimeout time.Duration
	// LogLevel is the lowest level logged.
	LogLevel slog.Level
}

// setting is one configuration value: its flag, its environment variable
// and the usage text.
type setting struct {
	flag, env, usage string
	secret           bool
	bind             func(fs *flag.FlagSet, name, usage string)
}

func (c *Config) settings() []setting {
	str := func(p *string, def string) func(*flag.FlagSet, string, string) {
		return func(fs *flag.FlagSet, name, usage string) { fs.StringVar(p, name, def, usage) }
	}
	return []setting{
		{flag: "mode", env: "ORDERSVC_MODE", usage: "delivery mode: transactional or outbox", bind: str(&c.Mode, ModeTransactional)},
		{flag: "http-addr", env: "ORDERSVC_HTTP_ADDR", usage: "HTTP listen address", bind: str(&c.HTTPAddr, "127.0.0.1:8080")},
		{flag: "dsn", env: "ORDERSVC_DSN", usage: "MySQL/MariaDB DSN", secret: true,
			bind: str(&c.DSN, "txmsg:txmsg@tcp(127.0.0.1:13306)/orderservice?parseTime=true&loc=UTC&charset=utf8mb4")},
		{flag: "namesrv", env: "ORDERSVC_NAMESRV", usage: "RocketMQ name servers, comma separated", bind: func(fs *flag.FlagSet, name, usage string) {
			c.NameServers = []string{"127.0.0.1:9876"}
			fs.Func(name, usage+" (default 127.0.0.1:9876)", func(v string) error { c.NameServers = splitList(v); return nil })
		}},
		{flag: "namespace", env: "ORDERSVC_NAMESPACE", usage: "RocketMQ namespace (optional)", bind: str(&c.Namespace, "")},
		{flag: "topic", env: "ORDERSVC_TOPIC", usage: "topic of OrderCreated events", bind: str(&c.Topic, "order-created")},
		{flag: "producer-group", env: "ORDERSVC_PRODUCER_GROUP", usage: "RocketMQ producer group", bind: str(&c.ProducerGroup, "orderservice-producer")},
		{flag: "consumer-group", env: "ORDERSVC_CONSUMER_GROUP", usage: "RocketMQ consumer group of the inventory consumer", bind: str(&c.ConsumerGroup, "orderservice-inventory")},
		{flag: "access-key", env: "ORDERSVC_ACCESS_KEY", usage: "RocketMQ ACL access key", secret: true, bind: str(&c.AccessKey, "")},
		{flag: "secret-key", env: "ORDERSVC_SECRET_KEY", usage: "RocketMQ ACL secret key (prefer the environment variable: flags show in ps)", secret: true, bind: str(&c.SecretKey, "")},
		{flag: "create-topic-on", env: "ORDERSVC_CREATE_TOPIC_ON", usage: "broker address on which to create the topic at startup if missing (development)", bind: str(&c.CreateTopicOn, "")},
		{flag: "seed", env: "ORDERSVC_SEED", usage: "insert the demo inventory at startup (existing rows are kept)", bind: func(fs *flag.FlagSet, name, usage string) {
			fs.BoolVar(&c.Seed, name, true, usage)
		}},
		{flag: "reconcile", env: "ORDERSVC_RECONCILE", usage: "publish again the committed events a broker failover or restart lost", bind: func(fs *flag.FlagSet, name, usage string) {
			fs.BoolVar(&c.Reconcile, name, true, usage)
		}},
		{flag: "reconcile-window", env: "ORDERSVC_RECONCILE_WINDOW", usage: "how far before a broker failover or restart the reconciler checks the committed events", bind: func(fs *flag.FlagSet, name, usage string) {
			fs.DurationVar(&c.ReconcileWindow, name, txrmq.DefaultReconcileWindow, usage)
		}},
		{flag: "shutdown-timeout", env: "ORDERSVC_SHUTDOWN_TIMEOUT", usage: "graceful shutdown deadline", bind: func(fs *flag.FlagSet, name, usage string) {
			fs.DurationVar(&c.ShutdownTimeout, name, 20*time.Second, usage)
		}},
		{flag: "log-level", env: "ORDERSVC_LOG_LEVEL", usage: "debug, info, warn or error", bind: func(fs *flag.FlagSet, name, usage string) {
			fs.TextVar(&c.LogLevel, name, slog.LevelInfo, usage)
		}},
	}
}

// ParseConfig reads the configuration from args (without the program
// name) and from environment variables looked up with getenv. It returns
// flag.ErrHelp after printing usage for -h.
func ParseConfig(args []string, getenv func(string) string, usageOut io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("orderservice", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	settings := c.settings()
	for _, s := range settings {
		s.bind(fs, s.flag, s.usage+" [$"+s.env+"]")
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, s := range settings {
		if v := getenv(s.env); v != "" && !given[s.flag] {
			if err := fs.Set(s.flag, v); err != nil {
				if s.secret {
					return Config{}, fmt.Errorf("$%s: invalid value", s.env)
				}
				return Config{}, fmt.Errorf("$%s=%q: %w", s.env, v, err)
			}
		}
	}
	return c, c.validate()
}

func (c *Config) validate() error {
	var errs []error
	if c.Mode != ModeTransactional && c.Mode != ModeOutbox {
		errs = append(errs, fmt.Errorf("mode %q: want %s or %s", c.Mode, ModeTransactional, ModeOutbox))
	}
	if _, err := mysql.ParseDSN(c.DSN); err != nil {
		errs = append(errs, errors.New("dsn is not a valid MySQL DSN")) // the error could quote the password
	}
	if len(c.NameServers) == 0 {
		errs = append(errs, errors.New("namesrv is empty"))
	}
	if err := txmsg.ValidateTopic(c.Topic); err != nil {
		errs = append(errs, err)
	}
	if c.ProducerGroup == "" || c.ConsumerGroup == "" {
		errs = append(errs, errors.New("producer-group and consumer-group are required"))
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		errs = append(errs, errors.New("access-key and secret-key must be set together"))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("shutdown-timeout must be positive"))
	}
	if c.ReconcileWindow < 0 {
		errs = append(errs, errors.New("reconcile-window must not be negative (0 means 2m)"))
	}
	return errors.Join(errs...)
}

// rocketmq returns the connection settings shared by every RocketMQ
// component of the service.
func (c *Config) rocketmq(log *slog.Logger) txrmq.Conn {
	return txrmq.Conn{
		NameServers: c.NameServers,
		Namespace:   c.Namespace,
		AccessKey:   c.AccessKey,
		SecretKey:   c.SecretKey,
		Logger:      log,
	}
}

// LogValue implements slog.LogValuer: the configuration without its
// secrets, so it can be logged at startup.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("mode", c.Mode),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("dsn", redactDSN(c.DSN)),
		slog.String("namesrv", strings.Join(c.NameServers, ",")),
		slog.String("namespace", c.Namespace),
		slog.String("topic", c.Topic),
		slog.String("producer_group", c.ProducerGroup),
		slog.String("consumer_group", c.ConsumerGroup),
		slog.Bool("acl", c.AccessKey != ""),
		slog.String("create_topic_on", c.CreateTopicOn),
		slog.Bool("seed", c.Seed),
		slog.Bool("reconcile", c.Reconcile),
		slog.Duration("reconcile_window", c.ReconcileWindow),
	)
}

// redactDSN hides the password of dsn.
func redactDSN(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "(invalid)"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "****"
	}
	return cfg.FormatDSN()
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		out = append(out, s)
	}
	return out
}

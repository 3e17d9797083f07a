// Package rmqproc runs the RocketMQ processes of the txmsg test bed: a name
// server and one broker, or a name server and the brokers of a cluster
// (masters only, or in the HA form a master and a slave per broker name), on
// loopback, from the Apache jars (or, for the default ports, with docker
// compose). It starts them and waits until they take messages, stops them,
// and crashes (SIGKILL), pauses (SIGSTOP) and resumes (SIGCONT) a broker for
// the tests and the chaos suite that need a broker to fail.
//
// Every instance has a directory of its own below
// <cache>/rocketmq/<version>/ holding its configuration, store, logs and pid
// files, so that an [Instance] only ever acts on processes it started with
// the same version and ports. The jars come from Maven Central; when they
// are missing, [Instance.Start] runs `scripts/rocketmq.sh fetch`, which
// downloads them with Maven. scripts/rocketmq.sh start|stop|status and the
// other verbs run ./internal/testbed/cmd/rmq, a command over this package.
package rmqproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Defaults of the test bed: the everyday name server and broker, and the
// two-broker cluster of make test-cluster.
const (
	DefaultNameServer        = "127.0.0.1:9876"
	DefaultBroker            = "127.0.0.1:10911"
	DefaultClusterNameServer = "127.0.0.1:29876"
	DefaultClusterBrokers    = "broker-a=127.0.0.1:30911,broker-b=127.0.0.1:31911"
	defaultNSPort            = 9876
	defaultBrokerPort        = 10911
	// DefaultHANameServer and DefaultHABrokers are the HA form's name
	// server and masters (make test-ha); each master's slave listens
	// [SlavePortOffset] above it.
	DefaultHANameServer = "127.0.0.1:20876"
	DefaultHABrokers    = "broker-a=127.0.0.1:21911,broker-b=127.0.0.1:22911"
	// SlavePortOffset is how far above its master's port a slave of the
	// HA form listens (broker-a 21911, broker-a-s 21921).
	SlavePortOffset = 10
	// SlaveSuffix names a master's slave in the HA form: broker-a-s.
	SlaveSuffix = "-s"
)

// Replication is how the masters of the HA form replicate to their
// slaves.
type Replication string

// Replications of the HA form. [ReplicationAsync]: brokerRole=ASYNC_MASTER,
// a send returns once the master stored the message; the slave follows
// some milliseconds behind. [ReplicationSync]: brokerRole=SYNC_MASTER with
// inSyncReplicas=2 (on RocketMQ 5.x SYNC_MASTER alone, with the default
// inSyncReplicas=1, waits for no slave): a send returns SEND_OK once the
// slave has the message too, and FLUSH_SLAVE_TIMEOUT after slaveTimeout
// (3 s) when it does not.
// [ReplicationController]: RocketMQ 5's automatic failover. The name
// server embeds a controller (one DLedger node on the name server's port
// plus [ControllerPortOffset]); each group's two brokers run with
// enableControllerMode and allAckInSyncStateSet, and the controller, not
// the configuration, says which one is the master: it elects one when the
// group starts and elects the other, from the group's in-sync replicas,
// when the master stops answering. A send returns SEND_OK once every
// broker of the in-sync set has the message; a slave that falls behind is
// dropped from the set, and the master goes on alone. RocketMQ 5.x only.
const (
	ReplicationAsync      Replication = "async"
	ReplicationSync       Replication = "sync"
	ReplicationController Replication = "controller"
)

// ControllerPortOffset is how far above the name server's port the
// controller of the controller form listens (20876: 20878).
const ControllerPortOffset = 2

// Mode says how the processes run.
type Mode string

// Modes: [ModeAuto] picks [ModeJar] for an instance started from the jars
// before (pid files in its directory), for other than the default ports and
// for the cluster; else [ModeDocker] when a Docker engine with docker
// compose works; else [ModeJar] when java is installed.
const (
	ModeAuto   Mode = "auto"
	ModeJar    Mode = "jar"
	ModeDocker Mode = "docker"
)

// Broker is one broker: its name (brokerName, e.g. broker-a) and address.
type Broker struct{ Name, Addr string }

// ParseBrokers reads brokers written as name=host:port, comma separated.
func ParseBrokers(s string) ([]Broker, error) {
	var out []Broker
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		name, addr, ok := strings.Cut(part, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("%q is not name=host:port", part)
		}
		out = append(out, Broker{name, addr})
	}
	return out, nil
}

// Config is one instance: a name server and its brokers.
type Config struct {
	// Root is the repository root (scripts/rocketmq/broker.conf,
	// scripts/versions.env). Default: the directory holding
	// scripts/rocketmq.sh above the working directory or this package.
	Root string
	// Cache is the cache root. Default <Root>/.cache.
	Cache string
	// Version is the RocketMQ version. Default ROCKETMQ_VERSION of
	// scripts/versions.env, and for the controller form
	// ROCKETMQ_CONTROLLER_VERSION.
	Version string
	// NameServer is the name server's host:port.
	NameServer string
	// Brokers are the brokers. Without Cluster: exactly one, whose name
	// is ignored (broker-a). With Cluster: two or more, each with its
	// own name.
	Brokers []Broker
	// Cluster runs the brokers as masters of one cluster
	// (DefaultCluster) with directories of their own; a broker name
	// given to an operation picks one of them.
	Cluster bool
	// HA, when set, runs the brokers as masters of two-replica groups:
	// each master of Brokers (brokerId 0, brokerRole ASYNC_MASTER or
	// SYNC_MASTER) gets a slave (brokerId 1, brokerRole SLAVE) of the same
	// brokerName, named name+[SlaveSuffix], on the master's port plus
	// [SlavePortOffset]. It implies Cluster; a broker name given to an
	// operation picks a master or a slave.
	HA Replication
	// ExtraConf is a file of broker settings appended to
	// scripts/rocketmq/broker.conf (later lines win); jar mode only.
	ExtraConf string
	// Stock runs the broker with RocketMQ's own defaults: its config file
	// is scripts/rocketmq/stock.conf, which names the instance and tunes
	// nothing, instead of scripts/rocketmq/broker.conf. Jar mode, one
	// broker on ports other than the default ones, no ExtraConf. See
	// [Instance.Stock] and [CheckStockDisk].
	Stock bool
	// Mode is how the processes run. Default [ModeAuto].
	Mode Mode
	// ReadyTimeout bounds the wait for readiness at start. Default 120 s.
	ReadyTimeout time.Duration
	// Log receives progress lines. Default os.Stderr.
	Log io.Writer
}

// FromEnv returns the configuration the environment describes:
// TXMSG_NAMESRV and TXMSG_BROKER (default 127.0.0.1:9876 and
// 127.0.0.1:10911), or with cluster TXMSG_CLUSTER_NAMESRV and
// TXMSG_CLUSTER_BROKERS (default 127.0.0.1:29876 and
// broker-a=127.0.0.1:30911,broker-b=127.0.0.1:31911); TXMSG_RMQ_VERSION,
// TXMSG_CACHE, TXMSG_ROCKETMQ_MODE and TXMSG_RMQ_EXTRA_CONF.
//
// It fails when a variable that earlier versions read is set, naming what
// replaced it, so that an old environment never picks other ports.
func FromEnv(cluster bool) (Config, error) {
	for _, r := range removedVars {
		if _, set := os.LookupEnv(r[0]); set {
			return Config{}, fmt.Errorf("%s is no longer read: %s (docs/testing.md, \"Environment variables\")", r[0], r[1])
		}
	}
	cfg := Config{
		Cache:     os.Getenv("TXMSG_CACHE"),
		Version:   os.Getenv("TXMSG_RMQ_VERSION"),
		Mode:      Mode(os.Getenv("TXMSG_ROCKETMQ_MODE")),
		ExtraConf: os.Getenv("TXMSG_RMQ_EXTRA_CONF"),
		Cluster:   cluster,
	}
	if cluster {
		cfg.NameServer = envOr("TXMSG_CLUSTER_NAMESRV", DefaultClusterNameServer)
		bs, err := ParseBrokers(envOr("TXMSG_CLUSTER_BROKERS", DefaultClusterBrokers))
		if err != nil {
			return cfg, fmt.Errorf("TXMSG_CLUSTER_BROKERS: %w", err)
		}
		cfg.Brokers = bs
	} else {
		cfg.NameServer = envOr("TXMSG_NAMESRV", DefaultNameServer)
		cfg.Brokers = []Broker{{"broker-a", envOr("TXMSG_BROKER", DefaultBroker)}}
	}
	return cfg, nil
}

// HAFromEnv returns the HA form's configuration: TXMSG_HA (async, sync
// or controller; default async), TXMSG_HA_NAMESRV and TXMSG_HA_BROKERS, the
// masters (default 127.0.0.1:20876 and
// broker-a=127.0.0.1:21911,broker-b=127.0.0.1:22911), and the variables
// [FromEnv] reads for every form.
func HAFromEnv() (Config, error) {
	cfg, err := FromEnv(true)
	if err != nil {
		return cfg, err
	}
	cfg.HA = Replication(envOr("TXMSG_HA", string(ReplicationAsync)))
	cfg.NameServer = envOr("TXMSG_HA_NAMESRV", DefaultHANameServer)
	bs, err := ParseBrokers(envOr("TXMSG_HA_BROKERS", DefaultHABrokers))
	if err != nil {
		return cfg, fmt.Errorf("TXMSG_HA_BROKERS: %w", err)
	}
	cfg.Brokers = bs
	return cfg, nil
}

// removedVars are variables earlier versions read, with what replaced them.
var removedVars = [][2]string{
	{"TXMSG_RMQ_BROKER_PORT", "set TXMSG_BROKER=127.0.0.1:<port> instead"},
	{"TXMSG_CLUSTER_BROKER_PORTS", "set TXMSG_CLUSTER_BROKERS=broker-a=127.0.0.1:<port>,broker-b=127.0.0.1:<port> instead"},
	{"TXMSG_RMQ_BROKERS", "use scripts/rocketmq.sh --cluster VERB (or a broker name) instead"},
	{"TXMSG_RMQ_EXCLUSIVE", "unset it: an instance off the default ports never reuses a process it did not start"},
	{"TXMSG_RMQ_READY_TIMEOUT", "use scripts/rocketmq.sh -ready-timeout D start instead"},
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// FindRoot returns the repository root: the first directory holding
// scripts/rocketmq.sh above the working directory, else the one above
// this package's source.
func FindRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if _, err := os.Stat(filepath.Join(dir, "scripts", "rocketmq.sh")); err == nil {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("cannot find scripts/rocketmq.sh above the working directory: run from the txmsg repository or set Config.Root")
}

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// pinnedVersion reads the version named key (ROCKETMQ_VERSION,
// ROCKETMQ_CONTROLLER_VERSION) from scripts/versions.env.
func pinnedVersion(root, key string) (string, error) {
	f, err := os.Open(filepath.Join(root, "scripts", "versions.env"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), key+"="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s missing from %s", key, f.Name())
}

func splitHostPort(what, addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s must be host:port (got %q)", what, addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port >= 65536 {
		return "", 0, fmt.Errorf("%s: %q is not a port", what, p)
	}
	return host, port, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// brokerPortsOverlap: a broker listens on port, port-2 (fast/VIP channel)
// and port+1 (HA).
func brokerPortsOverlap(a, b int) bool { return a-2 <= b+1 && a+1 >= b-2 }

func collides(nsPort, brokerPort int) bool { return nsPort >= brokerPort-2 && nsPort <= brokerPort+1 }

// normalize fills in the defaults and checks cfg.
func (cfg *Config) normalize() error {
	if cfg.Root == "" {
		root, err := FindRoot()
		if err != nil {
			return err
		}
		cfg.Root = root
	}
	if cfg.Cache == "" {
		cfg.Cache = filepath.Join(cfg.Root, ".cache")
	}
	if cfg.Version == "" {
		key := "ROCKETMQ_VERSION"
		if cfg.HA == ReplicationController {
			key = "ROCKETMQ_CONTROLLER_VERSION"
		}
		v, err := pinnedVersion(cfg.Root, key)
		if err != nil {
			return err
		}
		cfg.Version = v
	}
	if !versionRE.MatchString(cfg.Version) {
		return fmt.Errorf("the RocketMQ version must look like 4.9.7 or 5.3.3 (got %q; TXMSG_RMQ_VERSION)", cfg.Version)
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeAuto
	}
	switch cfg.Mode {
	case ModeAuto, ModeJar, ModeDocker:
	default:
		return fmt.Errorf("TXMSG_ROCKETMQ_MODE must be auto, docker or jar (got %q)", cfg.Mode)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 120 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	switch cfg.HA {
	case "":
	case ReplicationAsync, ReplicationSync:
		cfg.Cluster = true
	case ReplicationController:
		if strings.HasPrefix(cfg.Version, "4.") || strings.HasPrefix(cfg.Version, "5.0.") {
			return fmt.Errorf("the controller form needs RocketMQ 5.1 or later (TXMSG_RMQ_VERSION is %s)", cfg.Version)
		}
		cfg.Cluster = true
	default:
		return fmt.Errorf("the HA form's replication must be async, sync or controller (got %q; TXMSG_HA)", cfg.HA)
	}
	if cfg.Stock {
		switch {
		case cfg.Cluster:
			return errors.New("the stock form is a single broker, not the cluster form")
		case cfg.ExtraConf != "":
			return fmt.Errorf("the stock form takes no extra settings: unset TXMSG_RMQ_EXTRA_CONF (%s)", cfg.ExtraConf)
		case cfg.Mode == ModeDocker:
			return errors.New("the stock form runs from the jars: unset TXMSG_ROCKETMQ_MODE or set it to jar")
		}
	}
	if cfg.ExtraConf != "" {
		if f, err := os.Open(cfg.ExtraConf); err != nil {
			return fmt.Errorf("TXMSG_RMQ_EXTRA_CONF: cannot read %q: %w", cfg.ExtraConf, err)
		} else {
			_ = f.Close()
		}
	}
	_, nsPort, err := splitHostPort("the name server address (TXMSG_NAMESRV)", cfg.NameServer)
	if err != nil {
		return err
	}
	if len(cfg.Brokers) == 0 {
		return errors.New("no broker configured")
	}
	if !cfg.Cluster && len(cfg.Brokers) != 1 {
		return fmt.Errorf("%d brokers configured without the cluster form", len(cfg.Brokers))
	}
	if cfg.Cluster && len(cfg.Brokers) < 2 {
		return errors.New("the cluster form needs two brokers as name=host:port,... (TXMSG_CLUSTER_BROKERS)")
	}
	ports := make([]int, len(cfg.Brokers))
	if cfg.HA != "" {
		// Slaves listen SlavePortOffset above their masters: every
		// port, masters' and slaves', must keep clear of the others.
		var all []int
		for _, b := range cfg.Brokers {
			_, p, err := splitHostPort("broker "+b.Name, b.Addr)
			if err != nil {
				return err
			}
			all = append(all, p, p+SlavePortOffset)
		}
		for i, p := range all {
			if collides(nsPort, p) {
				return fmt.Errorf("name server port %d collides with the HA form's broker ports %d-%d", nsPort, p-2, p+1)
			}
			if cp := nsPort + ControllerPortOffset; cfg.HA == ReplicationController && collides(cp, p) {
				return fmt.Errorf("the controller's port %d (the name server's plus %d) collides with the HA form's broker ports %d-%d", cp, ControllerPortOffset, p-2, p+1)
			}
			for _, q := range all[:i] {
				if brokerPortsOverlap(p, q) {
					return fmt.Errorf("the HA form's broker ports %d and %d overlap (each broker uses port-2..port+1; a slave listens %d above its master)", q, p, SlavePortOffset)
				}
			}
		}
	}
	for i, b := range cfg.Brokers {
		_, p, err := splitHostPort("broker "+b.Name, b.Addr)
		if err != nil {
			return err
		}
		if p < 3 || p > 65534 {
			return fmt.Errorf("broker %s: port %d is not between 3 and 65534", b.Name, p)
		}
		if collides(nsPort, p) {
			return fmt.Errorf("name server port %d collides with broker %s's ports %d-%d (a broker also listens on port-2 and port+1)", nsPort, b.Name, p-2, p+1)
		}
		if cfg.Cluster {
			if brokerPortsOverlap(p, defaultBrokerPort) {
				return fmt.Errorf("the cluster's broker port %d overlaps the default broker's ports", p)
			}
			for j := range i {
				if cfg.Brokers[j].Name == b.Name {
					return fmt.Errorf("two brokers named %s", b.Name)
				}
				if brokerPortsOverlap(p, ports[j]) {
					return fmt.Errorf("broker %s port %d and broker %s port %d must be at least 4 apart (each uses port-2..port+1)",
						cfg.Brokers[j].Name, ports[j], b.Name, p)
				}
			}
		}
		ports[i] = p
	}
	if cfg.Cluster {
		if nsPort == defaultNSPort {
			return fmt.Errorf("the cluster form does not use the default name server port %d", defaultNSPort)
		}
		if cfg.Mode == ModeDocker {
			return errors.New("the cluster form runs from the jars; for Docker use the cluster profile of docker/compose.yml")
		}
	} else {
		cfg.Brokers = []Broker{{"broker-a", cfg.Brokers[0].Addr}}
	}
	if cfg.Stock && (nsPort == defaultNSPort || brokerPortsOverlap(ports[0], defaultBrokerPort)) {
		return fmt.Errorf("the stock form runs on ports of its own, not the everyday test bed's %d/%d: set TXMSG_NAMESRV and TXMSG_BROKER (make test-stock uses 127.0.0.1:18876 and 127.0.0.1:19911)",
			defaultNSPort, defaultBrokerPort)
	}
	return nil
}

package rmqproc

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Where BrokerStartup and NamesrvStartup put the config file's properties.
var (
	brokerConfigClasses = []string{"org.apache.rocketmq.common.BrokerConfig", "org.apache.rocketmq.store.config.MessageStoreConfig",
		"org.apache.rocketmq.remoting.netty.NettyServerConfig", "org.apache.rocketmq.remoting.netty.NettyClientConfig",
		"org.apache.rocketmq.auth.config.AuthConfig"}
	namesrvConfigClasses = []string{"org.apache.rocketmq.common.namesrv.NamesrvConfig",
		"org.apache.rocketmq.remoting.netty.NettyServerConfig", "org.apache.rocketmq.remoting.netty.NettyClientConfig",
		"org.apache.rocketmq.common.ControllerConfig"}
)

func (in *Instance) versionDir() string {
	return filepath.Join(in.cfg.Cache, "rocketmq", in.cfg.Version)
}
func (in *Instance) libDir() string { return filepath.Join(in.versionDir(), "lib") }
func (in *Instance) brokerConf() string {
	return filepath.Join(in.cfg.Root, "scripts", "rocketmq", in.baseConfName())
}

// baseConfName is the file of scripts/rocketmq the broker's config file
// starts from.
func (in *Instance) baseConfName() string {
	if in.cfg.Stock {
		return "stock.conf"
	}
	return "broker.conf"
}

// formLine marks a generated broker config file with the form it was
// written for; [Instance.Stock] reads it back.
const formLine = "# rmqproc form: "

func (in *Instance) jarsPresent() bool {
	for _, f := range []string{".complete", "rocketmq-broker-" + in.cfg.Version + ".jar", "rocketmq-namesrv-" + in.cfg.Version + ".jar"} {
		if _, err := os.Stat(filepath.Join(in.libDir(), f)); err != nil {
			return false
		}
	}
	return true
}

// ensureJars runs `scripts/rocketmq.sh fetch` (Maven) when the jars of the
// version are missing.
func (in *Instance) ensureJars() error {
	if in.jarsPresent() {
		return nil
	}
	cmd := exec.Command(filepath.Join(in.cfg.Root, "scripts", "rocketmq.sh"), "fetch")
	cmd.Env = append(os.Environ(), "TXMSG_RMQ_VERSION="+in.cfg.Version, "TXMSG_CACHE="+in.cfg.Cache)
	cmd.Stdout, cmd.Stderr = in.cfg.Log, in.cfg.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/rocketmq.sh fetch (RocketMQ %s jars into %s): %w", in.cfg.Version, in.libDir(), err)
	}
	if !in.jarsPresent() {
		return fmt.Errorf("scripts/rocketmq.sh fetch finished but the RocketMQ %s jars are not in %s", in.cfg.Version, in.libDir())
	}
	return nil
}

var (
	setterRE  = regexp.MustCompile(`^ *public [^(]*void set([A-Za-z0-9_]+)\([^,)]+\);$`)
	extendsRE = regexp.MustCompile(` extends (org\.apache\.rocketmq\.[A-Za-z0-9_.$]+)`)
	settingRE = regexp.MustCompile(`^\s*([A-Za-z0-9_.]+)\s*=`)
)

// configKeys returns the property names the given config classes accept.
// RocketMQ reads a config file by calling setX for each property x that
// has a setter (inherited ones included) and silently ignores the rest, so
// the setters are the settings. Cached in <lib>/.keys-NAME-HASH (HASH of
// the classes). Nil when javap
// is missing.
func (in *Instance) configKeys(name string, classes []string) []string {
	h := fnv.New32a()
	h.Write([]byte(strings.Join(classes, " ")))
	cache := filepath.Join(in.libDir(), fmt.Sprintf(".keys-%s-%08x", name, h.Sum32()))
	if b, err := os.ReadFile(cache); err == nil && len(b) > 0 {
		return strings.Fields(string(b))
	}
	javap := ""
	if java, err := findJava(); err == nil {
		if real, err := filepath.EvalSymlinks(java); err == nil && isExec(filepath.Join(filepath.Dir(real), "javap")) {
			javap = filepath.Join(filepath.Dir(real), "javap")
		}
	}
	if javap == "" {
		p, err := exec.LookPath("javap")
		if err != nil {
			return nil
		}
		javap = p
	}
	seen := map[string]bool{}
	var keys []string
	queue := slices.Clone(classes)
	for len(queue) > 0 {
		cls := queue[0]
		queue = queue[1:]
		out, err := exec.Command(javap, "-cp", filepath.Join(in.libDir(), "*"), "-public", cls).Output()
		if err != nil {
			continue // class not in this version
		}
		for _, line := range strings.Split(string(out), "\n") {
			if m := setterRE.FindStringSubmatch(line); m != nil {
				k := strings.ToLower(m[1][:1]) + m[1][1:]
				if !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
		}
		// Follow superclasses inside RocketMQ (5.x: BrokerConfig extends BrokerIdentity).
		if m := extendsRE.FindStringSubmatch(string(out)); m != nil {
			queue = append(queue, m[1])
		}
	}
	slices.Sort(keys)
	tmp := fmt.Sprintf("%s.tmp.%d", cache, os.Getpid())
	if os.WriteFile(tmp, []byte(strings.Join(keys, "\n")+"\n"), 0o644) == nil {
		_ = os.Rename(tmp, cache)
	}
	return keys
}

// filterConf turns each key=value line of lines whose key the version's
// config classes do not know into a comment, and returns the result and
// the keys left out.
func (in *Instance) filterConf(lines []string, keys []string) (out []string, dropped []string) {
	if len(keys) == 0 {
		return lines, nil
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
	}
	for _, line := range lines {
		m := settingRE.FindStringSubmatch(line)
		if m == nil {
			out = append(out, line)
			continue
		}
		key := m[1]
		// Up to 4.5.1 some settings were spelt "maped" (mapedFileSizeCommitLog).
		if alt := strings.Replace(key, "mapped", "maped", 1); !known[key] && alt != key && known[alt] {
			out = append(out, "# spelt "+alt+" in RocketMQ "+in.cfg.Version+":")
			line = strings.Replace(line, key, alt, 1)
			key = alt
		}
		if !known[key] {
			out = append(out, "# not a setting of RocketMQ "+in.cfg.Version+", left out: "+line)
			dropped = append(dropped, key)
			continue
		}
		out = append(out, line)
	}
	return out, dropped
}

func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n"), nil
}

// lastSetting returns the value of the last key=value line for key in path.
func lastSetting(path, key string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	val, found := "", false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && strings.TrimSpace(k) == key {
			val, found = strings.TrimSpace(v), true
		}
	}
	return val, found
}

// writeConfigs writes c's config file (conf/namesrv.conf or
// conf/broker.conf) and, for RocketMQ 4.x, its logback files.
func (in *Instance) writeConfigs(c component) error {
	for _, d := range []string{c.confDir(), c.logDir(), c.storeDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	const bind = "127.0.0.1"
	var lines []string
	var classes []string
	if c.kind == kindNamesrv {
		classes = namesrvConfigClasses
		lines = []string{
			"# Generated by internal/testbed/rmqproc; edit it, not this file.",
			fmt.Sprintf("listenPort=%d", c.port),
			"bindAddress=" + bind,
		}
		if in.cfg.HA == ReplicationController {
			lines = append(lines, "",
				"# --- the controller form: a controller inside the name server, one DLedger node ---",
				"enableControllerInNamesrv=true",
				"controllerDLegerGroup=txmsg",
				fmt.Sprintf("controllerDLegerPeers=n0-%s", in.controllerAddr()),
				"controllerDLegerSelfId=n0",
				"controllerStorePath="+in.controllerStore(),
				// Elect only a broker of the in-sync set: one that has
				// every message the master acknowledged.
				"enableElectUncleanMaster=false",
				"notifyBrokerRoleChanged=true")
		}
	} else {
		classes = brokerConfigClasses
		base, err := readLines(in.brokerConf())
		if err != nil {
			return err
		}
		form := "tuned"
		if in.cfg.Stock {
			form = "stock"
		}
		lines = append([]string{"# Generated by internal/testbed/rmqproc from scripts/rocketmq/" + in.baseConfName() + "; edit that file.",
			formLine + form}, base...)
		if in.cfg.ExtraConf != "" {
			extra, err := readLines(in.cfg.ExtraConf)
			if err != nil {
				return err
			}
			lines = append(lines, "", "# --- from "+in.cfg.ExtraConf+" (TXMSG_RMQ_EXTRA_CONF) ---")
			lines = append(lines, extra...)
		}
		lines = append(lines, "",
			"# --- set by internal/testbed/rmqproc for the jar path (later lines win) ---",
			"namesrvAddr="+in.cfg.NameServer,
			"brokerName="+c.brokerName,
			"brokerIP1=127.0.0.1",
			fmt.Sprintf("listenPort=%d", c.port),
			"bindAddress="+bind,
			"storePathRootDir="+c.storeDir(),
			"storePathCommitLog="+filepath.Join(c.storeDir(), "commitlog"))
		if c.role != "" && in.cfg.HA == ReplicationController {
			lines = append(lines, "",
				"# --- the HA form: controller mode (the controller elects the master) ---",
				// The controller assigns the id and the role; every
				// broker starts as a slave and the first of a group to
				// register is elected.
				"brokerId=-1",
				"brokerRole=SLAVE",
				"enableControllerMode=true",
				"controllerAddr="+in.controllerAddr(),
				// A send is acknowledged once every broker of the group's
				// in-sync set has it, so that an elected slave has it too.
				"allAckInSyncStateSet=true",
				"brokerIP2=127.0.0.1",
				fmt.Sprintf("haListenPort=%d", c.port+1),
				"registerNameServerPeriod=10000",
				// Either broker may be a slave: both answer pulls.
				"slaveReadEnable=true")
		} else if c.role != "" {
			id, role := in.roleOf(c)
			form := "# --- the HA form: " + string(in.cfg.HA) + " replication ---"
			if in.swapped(c.brokerName) {
				form += "\n# --- roles swapped by rmq promote (rebuild undoes it) ---"
			}
			lines = append(lines, "",
				form,
				fmt.Sprintf("brokerId=%d", id),
				"brokerRole="+role,
				// The master registers brokerIP2:haListenPort as its HA
				// address; the slave learns it from the name server.
				"brokerIP2=127.0.0.1",
				fmt.Sprintf("haListenPort=%d", c.port+1),
				// A slave learns its master's HA address when it registers;
				// 10 s (the least; default 30 s) shortens the wait after a
				// start.
				"registerNameServerPeriod=10000")
			if role == "SLAVE" {
				// A slave answers pulls only with slaveReadEnable
				// (otherwise SYSTEM_BUSY, "[REJECTREQUEST]system busy"):
				// without it consumers cannot read a dead master's queues
				// from its slave. Set on the slave only, so that a master
				// never sends consumers that lag to its slave.
				lines = append(lines, "slaveReadEnable=true")
			}
			if role == "SYNC_MASTER" {
				// RocketMQ 5.x waits for as many replicas, the master
				// included, as inSyncReplicas says: 1 (the default) makes
				// SYNC_MASTER wait for no slave.
				lines = append(lines, "totalReplicas=2", "inSyncReplicas=2")
			}
			if in.slaveActing(c.brokerName) {
				lines = append(lines, "# --- slave-acting-master (RIP-32), set by rmqproc SetSlaveActingMaster ---",
					"enableSlaveActingMaster=true", "enableRemoteEscape=true")
			}
		}
	}
	keys := in.configKeys(c.kind, classes)
	if keys == nil {
		in.logf("javap not found: the config files keep every setting (RocketMQ ignores the ones it does not know)")
	}
	out, dropped := in.filterConf(lines, keys)
	if err := os.WriteFile(filepath.Join(c.confDir(), c.kind+".conf"), []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.confDir(), c.kind+".dropped"), []byte(strings.Join(dropped, "\n")), 0o644); err != nil {
		return err
	}
	if len(dropped) > 0 {
		in.logf("RocketMQ %s has no %s setting %s: left out of %s", in.cfg.Version, c.kind, strings.Join(dropped, ","),
			filepath.Join(c.confDir(), c.kind+".conf"))
	}
	return in.writeLogback(c)
}

// writeLogback writes conf/logback_{namesrv,broker}.xml: RocketMQ 4.x
// configures logback from $ROCKETMQ_HOME/conf and exits when the file is
// missing; the files ship in the binary distribution, not in the jars.
// (5.x uses rmq.*.logback.xml from its jars.)
func (in *Instance) writeLogback(c component) error {
	for _, name := range []string{kindNamesrv, kindBroker} {
		var b strings.Builder
		b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- Generated by internal/testbed/rmqproc for RocketMQ 4.x. -->\n<configuration>\n")
		b.WriteString(appender(c.rmqLogs(), name))
		if name == kindBroker {
			for _, a := range []string{"transaction", "store", "stats"} {
				b.WriteString(appender(c.rmqLogs(), a))
			}
			for _, l := range [][2]string{{"RocketmqTransaction", "transaction"}, {"RocketmqStore", "store"}, {"RocketmqStoreError", "store"},
				{"RocketmqStats", "stats"}, {"RocketmqBrokerStats", "stats"}, {"RocketmqCommercial", "stats"}} {
				fmt.Fprintf(&b, "  <logger name=%q additivity=\"false\" level=\"INFO\"><appender-ref ref=%q/></logger>\n", l[0], l[1])
			}
		}
		fmt.Fprintf(&b, "  <root level=\"INFO\"><appender-ref ref=%q/></root>\n</configuration>\n", name)
		if err := os.WriteFile(filepath.Join(c.confDir(), "logback_"+name+".xml"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// appender is a size-rolled file appender for dir/name.log.
func appender(dir, name string) string {
	return fmt.Sprintf(`  <appender name="%[1]s" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <file>%[2]s/%[1]s.log</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">
      <fileNamePattern>%[2]s/%[1]s.%%i.log.gz</fileNamePattern>
      <minIndex>1</minIndex>
      <maxIndex>3</maxIndex>
    </rollingPolicy>
    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">
      <maxFileSize>64MB</maxFileSize>
    </triggeringPolicy>
    <encoder><pattern>%%d{yyyy-MM-dd HH:mm:ss,SSS} %%p %%t - %%m%%n</pattern><charset>UTF-8</charset></encoder>
  </appender>
`, name, dir)
}

package rmqproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotRunning is returned by [Instance.Status] when a process is not
// running.
var ErrNotRunning = errors.New("not running")

// Instance is a name server and its brokers, as a [Config] describes them.
// Its methods take a broker name: "" means every broker (the one broker
// outside the cluster form); a name picks one broker of the cluster.
type Instance struct {
	cfg     Config
	nsHost  string
	ns      component
	brokers []component
	dir     string // the instance's directory (the name server's)
	// jvms holds the JVMs this Instance launched, to tell when one exits.
	jvms *launched
}

// New checks cfg and returns its instance. It starts nothing.
func New(cfg Config) (*Instance, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	in := &Instance{cfg: cfg, jvms: &launched{}}
	nsHost, nsPort, _ := splitHostPort("name server", cfg.NameServer)
	in.nsHost = nsHost
	vdir := in.versionDir()
	_, firstPort, _ := splitHostPort("broker", cfg.Brokers[0].Addr)
	switch {
	case cfg.HA == ReplicationController:
		// Stores of the controller form hold its epochs and ids: never
		// mixed with the other HA forms' on the same ports.
		in.dir = filepath.Join(vdir, fmt.Sprintf("ha-controller-%d", nsPort))
	case cfg.HA != "":
		in.dir = filepath.Join(vdir, fmt.Sprintf("ha-%d", nsPort))
	case cfg.Cluster:
		in.dir = filepath.Join(vdir, fmt.Sprintf("cluster-%d", nsPort))
	case nsPort == defaultNSPort && firstPort == defaultBrokerPort:
		// The default ports keep the version directory itself.
		in.dir = vdir
	default:
		in.dir = filepath.Join(vdir, fmt.Sprintf("ports-%d-%d", nsPort, firstPort))
	}
	in.ns = component{kind: kindNamesrv, name: kindNamesrv, dir: in.dir, host: nsHost, port: nsPort}
	for _, b := range cfg.Brokers {
		_, p, _ := splitHostPort("broker", b.Addr)
		c := component{kind: kindBroker, name: b.Name, brokerName: b.Name, dir: in.dir, host: "127.0.0.1", port: p}
		if cfg.Cluster {
			c.dir = filepath.Join(in.dir, b.Name)
		} else {
			c.name = kindBroker
		}
		if cfg.HA != "" {
			// In the controller form the configured master is only the
			// one started first, which the controller elects.
			c.role = in.masterRole()
			s := c
			s.name = b.Name + SlaveSuffix
			s.dir = filepath.Join(in.dir, s.name)
			s.port = p + SlavePortOffset
			s.brokerID, s.role = 1, "SLAVE"
			in.brokers = append(in.brokers, c, s)
			continue
		}
		in.brokers = append(in.brokers, c)
	}
	return in, nil
}

// Config returns the instance's configuration, defaults filled in.
func (in *Instance) Config() Config { return in.cfg }

// Dir returns the instance's directory: configuration, store, logs and
// pid files of the name server, and of the broker outside the cluster
// form (each cluster broker has a subdirectory named after it).
func (in *Instance) Dir() string { return in.dir }

func (in *Instance) logf(format string, args ...any) {
	fmt.Fprintf(in.cfg.Log, "rmq: "+format+"\n", args...)
}

// defaultPorts reports whether the instance is the everyday test bed's.
func (in *Instance) defaultPorts() bool {
	return !in.cfg.Cluster && in.ns.port == defaultNSPort && in.brokers[0].port == defaultBrokerPort
}

// exclusive: never reuse a process this instance did not start. Only the
// default ports reuse what already serves them (a broker started by other
// means); an instance on ports of its own, the cluster included, is
// always its own.
func (in *Instance) exclusive() bool { return !in.defaultPorts() }

// targets returns the brokers an operation on broker acts on.
func (in *Instance) targets(broker string) ([]component, error) {
	if broker == "" {
		return in.brokers, nil
	}
	if !in.cfg.Cluster {
		return nil, fmt.Errorf("a broker name (%q) is for the cluster form", broker)
	}
	var names []string
	for _, b := range in.brokers {
		if b.name == broker {
			return []component{b}, nil
		}
		names = append(names, b.name)
	}
	return nil, fmt.Errorf("no broker %q in the cluster (brokers: %s)", broker, strings.Join(names, ", "))
}

func (in *Instance) brokerList() []Broker {
	if !in.cfg.Cluster {
		return nil
	}
	if in.cfg.HA == "" {
		return in.cfg.Brokers
	}
	// A group whose slave was promoted has its master at the slave's
	// address.
	var out []Broker
	for _, b := range in.brokers {
		if _, role := in.roleOf(b); !isSlave(role) {
			out = append(out, Broker{Name: b.brokerName, Addr: b.addr()})
		}
	}
	return out
}

// mode resolves ModeAuto, or returns "remote" for a name server not on
// loopback.
func (in *Instance) mode() (Mode, error) {
	if !isLoopback(in.nsHost) {
		if in.cfg.Cluster {
			return "", fmt.Errorf("the cluster form runs on loopback only (name server %s)", in.cfg.NameServer)
		}
		return "remote", nil
	}
	if in.cfg.Mode != ModeAuto {
		return in.cfg.Mode, nil
	}
	if !in.defaultPorts() {
		return ModeJar, nil
	}
	for _, c := range append([]component{in.ns}, in.brokers...) {
		if _, err := os.Stat(c.pidFile()); err == nil {
			return ModeJar, nil // JVMs started here before: keep managing them
		}
	}
	if dockerOK() {
		return ModeDocker, nil
	}
	if _, err := findJava(); err == nil {
		return ModeJar, nil
	}
	return "", errors.New("neither a working Docker engine (with docker compose) nor java found: install Docker, or a JDK 17 and Maven (apt-get install openjdk-17-jdk-headless maven)")
}

// resolve returns the components broker names (every broker when "") and
// how this instance runs them.
func (in *Instance) resolve(broker string) ([]component, Mode, error) {
	targets, err := in.targets(broker)
	if err != nil {
		return nil, "", err
	}
	mode, err := in.mode()
	if err != nil {
		return nil, "", err
	}
	return targets, mode, nil
}

// Start starts what is not running of the name server and the brokers
// (broker: only that one of the cluster) and waits until every broker takes
// messages. On the default ports a process it did not start is reused when
// it answers; elsewhere such a process makes Start fail. A name server not
// on loopback is only waited for.
func (in *Instance) Start(ctx context.Context, broker string) error {
	targets, mode, err := in.resolve(broker)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, in.cfg.ReadyTimeout)
	defer cancel()
	switch mode {
	case "remote":
		in.logf("name server %s is not a loopback address: not starting anything, only checking it", in.cfg.NameServer)
		return WaitReady(ctx, in.cfg.NameServer, nil, in.cfg.Log)
	case ModeDocker:
		return in.dockerStart(ctx)
	}
	if in.cfg.Stock {
		if err := CheckStockDisk(in.dir); err != nil {
			return fmt.Errorf("%w: %w", errStockDisk, err)
		}
		pct, _ := DiskUsage(in.dir)
		in.logf("stock form: %s (RocketMQ's own defaults); the disk of %s is %.0f%% used (refused above %d%%)",
			in.brokerConf(), in.dir, pct, StockDiskCleanForciblyRatio)
	}
	unlock, err := lockDir(in.dir, ".lock", 10*time.Minute)
	if err != nil {
		return err
	}
	defer unlock()
	t0 := time.Now()

	addrFile := filepath.Join(in.dir, "namesrv.addr")
	nsPid, nsOK := in.ns.pid()
	running := nsOK
	for _, b := range targets {
		if _, ok := b.pid(); ok {
			running = true
		}
	}
	if prev, err := os.ReadFile(addrFile); err == nil && running && strings.TrimSpace(string(prev)) != in.cfg.NameServer {
		return fmt.Errorf("RocketMQ started from %s is running with name server %s, not %s: stop it first (with that name server)",
			in.dir, strings.TrimSpace(string(prev)), in.cfg.NameServer)
	}

	if in.cfg.HA == ReplicationController {
		// The controller elects the first broker of a group to register:
		// start the configured masters before the slaves.
		targets = slices.Clone(targets)
		slices.SortStableFunc(targets, func(a, b component) int { return cmp.Compare(a.brokerID, b.brokerID) })
	}
	var started, external []component
	if nsOK {
		in.logf("namesrv already running (pid %d)", nsPid)
	} else if portOpen(in.ns.addr()) {
		if err := in.refuseForeign(in.ns); err != nil {
			return err
		}
		in.logf("port %d is already served by a process not started here; will reuse it if it answers", in.ns.port)
		external = append(external, in.ns)
	} else {
		if err := in.prepare(in.ns); err != nil {
			return err
		}
		if err := os.WriteFile(addrFile, []byte(in.cfg.NameServer+"\n"), 0o644); err != nil {
			return err
		}
		if err := in.launch(in.ns, "-Xms128m", "-Xmx256m"); err != nil {
			return err
		}
		started = append(started, in.ns)
		if err := in.waitPort(in.ns, 60*time.Second); err != nil {
			return err
		}
	}
	for _, b := range targets {
		if pid, ok := b.pid(); ok {
			if !in.cfg.Cluster && in.Stock() != in.cfg.Stock {
				return fmt.Errorf("the broker running from %s (pid %d) has the %s settings, not the %s ones: stop it first (scripts/rocketmq.sh stop, same TXMSG_NAMESRV and TXMSG_BROKER)",
					in.dir, pid, formName(in.Stock()), formName(in.cfg.Stock))
			}
			in.logf("%s already running (pid %d)", b.name, pid)
			continue
		}
		if portOpen(b.addr()) {
			if err := in.refuseForeign(b); err != nil {
				return err
			}
			in.logf("port %d is already served by a process not started here; will reuse it if it answers", b.port)
			external = append(external, b)
			continue
		}
		if in.cfg.HA == ReplicationController {
			// Wait for the election of the master started first, or a
			// slave could be elected in its place.
			for _, m := range started {
				if m.kind == kindBroker && m.brokerName == b.brokerName {
					if err := in.waitElected(ctx, b.brokerName, m); err != nil {
						return err
					}
				}
			}
		}
		if err := in.prepare(b); err != nil {
			return err
		}
		heap := []string{"-Xms256m", "-Xmx768m", "-XX:MaxDirectMemorySize=512m"}
		switch {
		case in.cfg.HA != "":
			// Four brokers and a name server on a small machine.
			heap = []string{"-Xms128m", "-Xmx384m", "-XX:MaxDirectMemorySize=192m", "-XX:ReservedCodeCacheSize=64m"}
		case in.cfg.Cluster:
			heap = []string{"-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m"}
		}
		if err := in.launch(b, heap...); err != nil {
			return err
		}
		started = append(started, b)
	}

	in.logf("waiting (up to %s) until the name server at %s routes a test message%s ...", in.cfg.ReadyTimeout, in.cfg.NameServer,
		map[bool]string{true: " to every broker", false: ""}[in.cfg.Cluster])
	err = waitReady(ctx, in.cfg.NameServer, in.brokerList(), in.cfg.Log, func() error {
		for _, c := range started {
			if !in.running(c) {
				return exited(c)
			}
		}
		return nil
	})
	if err != nil {
		if len(external) > 0 {
			return fmt.Errorf("ports of %s are served by something not started here, and RocketMQ at %s does not answer (%v): stop that process or use other ports",
				names(external), in.cfg.NameServer, err)
		}
		return fmt.Errorf("%w; logs: %s", err, in.logsHint())
	}
	for _, c := range started {
		if c.kind == kindBroker && in.cfg.HA == ReplicationController {
			// The role comes from the election: wait for one (of c, or
			// of the broker already running).
			if err := in.waitElected(ctx, c.brokerName, c); err != nil {
				return err
			}
		}
		if _, role := in.roleOf(c); isSlave(role) {
			// A slave takes no sends: ready is its port open and a
			// replication connection on its master's HA port (it learns
			// the address from the name server at its next
			// registration).
			if err := in.waitPort(c, time.Until(deadlineOf(ctx))); err != nil {
				return err
			}
			if err := in.waitReplicating(ctx, c); err != nil {
				return err
			}
			if in.cfg.HA == ReplicationController {
				if err := in.waitInSync(ctx, c.brokerName, c); err != nil {
					return err
				}
			}
		}
	}
	if len(external) > 0 {
		in.logf("reusing %s not started here (it answers at %s)", names(external), in.cfg.NameServer)
	}
	in.logf("RocketMQ %s ready after %s: name server %s, %s", in.cfg.Version, time.Since(t0).Round(time.Second), in.cfg.NameServer, in.brokerSummary())
	in.logf("logs: %s", in.logsHint())
	return nil
}

// prepare makes sure the jars are there and writes c's configuration.
func (in *Instance) prepare(c component) error {
	if err := in.ensureJars(); err != nil {
		return err
	}
	return in.writeConfigs(c)
}

func names(cs []component) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.name)
	}
	return strings.Join(out, ", ")
}

func (in *Instance) brokerSummary() string {
	var out []string
	for _, b := range in.brokers {
		out = append(out, b.name+" "+b.addr())
	}
	return strings.Join(out, ", ")
}

func (in *Instance) logsHint() string {
	var out []string
	seen := map[string]bool{}
	for _, c := range append([]component{in.ns}, in.brokers...) {
		if !seen[c.dir] {
			seen[c.dir] = true
			out = append(out, c.logDir())
		}
	}
	return strings.Join(out, ", ") + " (JVM output in *.out, RocketMQ's own logs in rocketmqlogs/)"
}

// refuseForeign fails when the instance is exclusive and c's port is
// served by a process it did not start, naming the JVMs other instances
// of the cache started, if any.
func (in *Instance) refuseForeign(c component) error {
	if !in.exclusive() {
		return nil
	}
	var owners []string
	pattern := []string{
		filepath.Join(in.cfg.Cache, "rocketmq", "*", c.kind+".pid"),
		filepath.Join(in.cfg.Cache, "rocketmq", "*", "*", c.kind+".pid"),
		filepath.Join(in.cfg.Cache, "rocketmq", "*", "*", "*", c.kind+".pid"),
	}
	for _, p := range pattern {
		files, _ := filepath.Glob(p)
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && alive(pid) {
					owners = append(owners, fmt.Sprintf("%s (pid %d)", filepath.Dir(f), pid))
				}
			}
		}
	}
	msg := fmt.Sprintf("%s is already served by a process not started for RocketMQ %s on these ports (an instance on ports of its own never reuses one)",
		c.addr(), in.cfg.Version)
	if len(owners) > 0 {
		msg += "; " + c.kind + " JVMs started by the test bed: " + strings.Join(owners, ", ")
	}
	return errors.New(msg + ". Stop it first.")
}

// Stop stops broker (every broker, then the name server, when "").
// Brokers go first: on shutdown a broker unregisters from the name server.
func (in *Instance) Stop(broker string) error {
	targets, mode, err := in.resolve(broker)
	if err != nil {
		return err
	}
	switch mode {
	case "remote":
		in.logf("name server %s is not local: nothing to stop", in.cfg.NameServer)
		return nil
	case ModeDocker:
		return in.dockerStop()
	}
	unlock, err := lockDir(in.dir, ".lock", 10*time.Minute)
	if err != nil {
		return err
	}
	defer unlock()
	// Brokers shut down in 10-20 s each: all at once.
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, b := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = in.stopOne(b)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if broker == "" {
		return in.stopOne(in.ns)
	}
	return nil
}

// Kill sends broker SIGKILL (a crash; the name server stays up) and waits
// until it is gone; [Instance.Start] brings it back. In the cluster form a
// broker must be named, so that a slip never takes the whole cluster down.
func (in *Instance) Kill(broker string) error {
	if in.cfg.Cluster && broker == "" {
		return errors.New("kill needs a broker name in the cluster form, e.g. broker-a")
	}
	return in.signalBrokers(broker, syscall.SIGKILL)
}

// Pause sends broker (every broker when "") SIGSTOP: it holds its
// connections but answers nothing.
func (in *Instance) Pause(broker string) error { return in.signalBrokers(broker, syscall.SIGSTOP) }

// Resume sends broker (every broker when "") SIGCONT. A broker of the
// cluster that is not running is left alone.
func (in *Instance) Resume(broker string) error { return in.signalBrokers(broker, syscall.SIGCONT) }

func (in *Instance) signalBrokers(broker string, sig syscall.Signal) error {
	targets, mode, err := in.resolve(broker)
	if err != nil {
		return err
	}
	switch mode {
	case "remote":
		in.logf("name server %s is not local: nothing to %s", in.cfg.NameServer, verbOf(sig))
		return nil
	case ModeDocker:
		return in.dockerSignal(sig)
	}
	// No lock: a crash does not wait for a start in progress.
	for _, b := range targets {
		if _, ok := b.pid(); !ok && sig == syscall.SIGCONT && in.cfg.Cluster {
			continue // nothing paused there
		}
		if err := in.signal(b, sig); err != nil {
			return err
		}
	}
	return nil
}

// Owns reports whether broker (every broker when "") runs and was started
// by this instance, so that Kill, Pause and Resume can act on it.
func (in *Instance) Owns(broker string) bool {
	targets, mode, err := in.resolve(broker)
	if err != nil || mode == "remote" {
		return false
	}
	if mode == ModeDocker {
		return dockerRunning(in, "broker")
	}
	for _, b := range targets {
		if _, ok := b.pid(); !ok {
			return false
		}
	}
	return true
}

// Status writes one line per process (the name server, then broker or
// every broker) and returns [ErrNotRunning] when one is not running.
func (in *Instance) Status(broker string) error {
	targets, mode, err := in.resolve(broker)
	if err != nil {
		return err
	}
	w := in.cfg.Log
	switch mode {
	case "remote":
		if portOpen(in.cfg.NameServer) {
			fmt.Fprintf(w, "namesrv: %s answers (remote)\n", in.cfg.NameServer)
			return nil
		}
		fmt.Fprintf(w, "namesrv: %s does not answer (remote)\n", in.cfg.NameServer)
		return ErrNotRunning
	case ModeDocker:
		return in.dockerStatus()
	}
	var res error
	for _, c := range append([]component{in.ns}, targets...) {
		label := c.name
		if pid, ok := c.pid(); ok {
			if portOpen(c.addr()) {
				fmt.Fprintf(w, "%s: running (pid %d, %s)\n", label, pid, c.addr())
			} else {
				fmt.Fprintf(w, "%s: running (pid %d), %s not open yet\n", label, pid, c.addr())
			}
			continue
		}
		res = ErrNotRunning
		if portOpen(c.addr()) {
			fmt.Fprintf(w, "%s: not running from %s; %s is served by another process\n", label, c.dir, c.addr())
		} else {
			fmt.Fprintf(w, "%s: not running\n", label)
		}
	}
	fmt.Fprintf(w, "logs: %s\n", in.logsHint())
	return res
}

// Wipe deletes the store and logs of broker (of every broker and the name
// server when ""), so that the next start begins with an empty broker. It
// fails while one of those processes runs or a broker's port is served.
func (in *Instance) Wipe(broker string) error {
	targets, mode, err := in.resolve(broker)
	if err != nil {
		return err
	}
	switch mode {
	case "remote":
		in.logf("name server %s is not local: nothing to wipe", in.cfg.NameServer)
		return nil
	case ModeDocker:
		return errors.New("wipe is for the jar path: the containers keep their store inside and lose it when removed (stop)")
	}
	unlock, err := lockDir(in.dir, ".lock", 10*time.Minute)
	if err != nil {
		return err
	}
	defer unlock()
	if broker == "" {
		if _, ok := in.ns.pid(); ok {
			return fmt.Errorf("the name server of %s is running: stop it first", in.dir)
		}
	}
	for _, b := range targets {
		if _, ok := b.pid(); ok {
			return fmt.Errorf("%s of %s is running: stop it first", b.name, b.dir)
		}
		if portOpen(b.addr()) {
			return fmt.Errorf("%s is served by another process: not wiping %s", b.addr(), b.storeDir())
		}
	}
	for _, b := range targets {
		if err := os.RemoveAll(b.storeDir()); err != nil {
			return err
		}
		if err := os.RemoveAll(b.logDir()); err != nil {
			return err
		}
		in.logf("deleted %s and %s", b.storeDir(), b.logDir())
	}
	if broker == "" {
		for _, b := range in.cfg.Brokers {
			if err := os.RemoveAll(in.swappedFile(b.Name)); err != nil {
				return err
			}
			if err := os.RemoveAll(in.actingFile(b.Name)); err != nil {
				return err
			}
		}
	}
	if broker == "" && in.cfg.HA == ReplicationController {
		if err := os.RemoveAll(in.controllerStore()); err != nil {
			return err
		}
	}
	if broker == "" && in.cfg.Cluster {
		return os.RemoveAll(in.ns.logDir())
	}
	return nil
}

// deadlineOf returns ctx's deadline, or a minute from now.
func deadlineOf(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(time.Minute)
}

// waitReplicating waits until a connection to the HA port of slave's
// master is established, failing early when the slave's JVM exits.
func (in *Instance) waitReplicating(ctx context.Context, slave component) error {
	master, _, err := in.group(slave.brokerName)
	if err != nil {
		return err
	}
	haPort := master.port + 1
	for {
		if haConnected(haPort) {
			in.logf("%s replicates from its master (HA port %d)", slave.name, haPort)
			return nil
		}
		if !in.running(slave) {
			return exited(slave)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not connect to its master's HA port %d: %w; logs: %s", slave.name, haPort, ctx.Err(), slave.logDir())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// haConnected reports whether /proc/net/tcp{,6} hold an established
// connection whose local port is port (the master's side of a slave's
// replication connection).
func haConnected(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "01" {
				return true
			}
		}
	}
	return false
}

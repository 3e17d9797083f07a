package rmqproc

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	kindNamesrv = "namesrv"
	kindBroker  = "broker"
)

// component is one JVM: the name server or a broker, in its directory.
type component struct {
	kind string // kindNamesrv or kindBroker
	name string // label: "namesrv", "broker", or the cluster broker's name
	// brokerName is the broker's brokerName setting.
	brokerName string
	// brokerID and role are the broker's brokerId and brokerRole in the
	// HA form ("" elsewhere: broker.conf's).
	brokerID int
	role     string
	dir      string // user.home and ROCKETMQ_HOME of the JVM
	host     string
	port     int
}

func (c component) pidFile() string  { return filepath.Join(c.dir, c.kind+".pid") }
func (c component) outFile() string  { return filepath.Join(c.dir, "logs", c.kind+".out") }
func (c component) confDir() string  { return filepath.Join(c.dir, "conf") }
func (c component) logDir() string   { return filepath.Join(c.dir, "logs") }
func (c component) rmqLogs() string  { return filepath.Join(c.dir, "logs", "rocketmqlogs") }
func (c component) storeDir() string { return filepath.Join(c.dir, "store") }
func (c component) addr() string     { return net.JoinHostPort(c.host, strconv.Itoa(c.port)) }

func (c component) class() string {
	if c.kind == kindNamesrv {
		return "org.apache.rocketmq.namesrv.NamesrvStartup"
	}
	return "org.apache.rocketmq.broker.BrokerStartup"
}

// alive reports whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: trust kill(0)
	}
	// pid (comm) S ...: the state follows the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		// A JVM's main thread turns zombie while its other threads are
		// still exiting, holding the process's sockets.
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		return err == nil && len(tasks) > 1
	}
	return true
}

// pid returns the pid of c's JVM when its pid file names a live process
// whose command line is this component's: its main class and user.home
// exactly c.dir (instances on other ports live in subdirectories of the
// default one), so that a recycled pid is never taken for it.
func (c component) pid() (int, bool) {
	b, err := os.ReadFile(c.pidFile())
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !alive(pid) {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, false
	}
	var class, home bool
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		class = class || arg == c.class()
		home = home || arg == "-Duser.home="+c.dir
	}
	return pid, class && home
}

// portOpen reports whether something accepts TCP connections at addr.
func portOpen(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// lockDir takes an exclusive flock on dir/name, waiting up to wait, and
// returns its release. The shell scripts of earlier versions used the same
// lock files.
func lockDir(dir, name string, wait time.Duration) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("another start, stop or wipe holds %s (%v); wait for it or stop it", path, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// findJava returns $JAVA_HOME/bin/java or java on PATH.
func findJava() (string, error) {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		if p := filepath.Join(h, "bin", "java"); isExec(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("no 'java' found: install a JDK 17 (apt-get install openjdk-17-jdk-headless) and maven, or Docker")
	}
	return p, nil
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// javaMajor returns the feature version of java (8 for 1.8).
func javaMajor(java string) int {
	out, _ := exec.Command(java, "-version").CombinedOutput()
	_, rest, ok := strings.Cut(string(out), `version "`)
	if !ok {
		return 0
	}
	v, _, _ := strings.Cut(rest, `"`)
	parts := strings.SplitN(v, ".", 3)
	major, _ := strconv.Atoi(parts[0])
	if major == 1 && len(parts) > 1 {
		major, _ = strconv.Atoi(parts[1])
	}
	return major
}

// launch starts c's JVM in a session of its own (it outlives the caller)
// with output to c.outFile, writes its pid file and reaps it when it
// exits while this process lives.
func (in *Instance) launch(c component, heap ...string) error {
	java, err := findJava()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.logDir(), 0o755); err != nil {
		return err
	}
	_ = os.Remove(c.pidFile())
	out, err := os.OpenFile(c.outFile(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	args := append(in.javaFlags(java, c), heap...)
	args = append(args, "-Drmq.logback.configurationFile=rmq."+c.kind+".logback.xml",
		"-cp", filepath.Join(in.libDir(), "*"), c.class(), "-c", filepath.Join(c.confDir(), c.kind+".conf"))
	cmd := exec.Command(java, args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "ROCKETMQ_HOME="+c.dir)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the %s JVM: %w", c.name, err)
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	in.jvms.add(c.dir, exit)
	if err := os.WriteFile(c.pidFile(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	in.logf("started %s (pid %d)", c.name, cmd.Process.Pid)
	return nil
}

// javaFlags are the JVM flags every component gets.
func (in *Instance) javaFlags(java string, c component) []string {
	f := []string{"-server", "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow",
		"-Duser.home=" + c.dir, "-Drocketmq.home.dir=" + c.dir, "-Dfile.encoding=UTF-8"}
	v4 := strings.HasPrefix(in.cfg.Version, "4.")
	if javaMajor(java) >= 9 {
		// DefaultMappedFile/CommitLog/TransientStorePool cast to
		// sun.nio.ch.DirectBuffer (mlock/munlock, madvise, page-cache
		// residency). Without this export those paths die with
		// IllegalAccessError on JDK 16+ (seen with warmMapedFileEnable=true:
		// the AllocateMappedFileService thread dies and every send then
		// times out).
		f = append(f, "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED")
		if c.kind == kindNamesrv && in.cfg.HA == ReplicationController {
			// The controller's Hessian serializer makes the fields of
			// java.lang.StackTraceElement accessible at start; without the
			// open it prints a stack trace per field.
			f = append(f, "--add-opens=java.base/java.lang=ALL-UNNAMED")
		}
		if v4 {
			// 4.x unmaps a file (MappedFile.clean: on shutdown, and when
			// deleting expired or truncating dirty commit log, consume queue
			// and index files) through reflection on
			// java.nio.DirectByteBuffer.attachment()/cleaner() and
			// jdk.internal.ref.Cleaner.clean(). On JDK 16+ each fails with
			// InaccessibleObjectException unless both packages are opened:
			// the shutdown hook dies half-way and leaves store/abort behind,
			// so the next start recovers as after a crash. (5.x uses
			// Unsafe.invokeCleaner instead.)
			f = append(f, "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED")
		}
	}
	if v4 {
		// 4.x has the disk-full thresholds as system properties (fractions,
		// default 0.90 / 0.85), not as settings: pass broker.conf's
		// percentages that way.
		for _, k := range []string{"diskSpaceWarningLevelRatio", "diskSpaceCleanForciblyRatio"} {
			if v, ok := lastSetting(in.brokerConf(), k); ok {
				if p, err := strconv.Atoi(v); err == nil {
					f = append(f, fmt.Sprintf("-Drocketmq.broker.%s=%.2f", k, float64(p)/100))
				}
			}
		}
	}
	return f
}

// waitPort waits up to d until c's port opens, failing early when its JVM
// exits.
func (in *Instance) waitPort(c component, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if portOpen(c.addr()) {
			return nil
		}
		if !in.running(c) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("the %s did not open %s; logs: %s, %s\n%s", c.name, c.addr(), c.outFile(),
		filepath.Join(c.rmqLogs(), c.kind+".log"), tail(c.outFile(), 20, nil))
}

// tail returns the last n lines of path without those skip matches.
func tail(path string, n int, skip func(string) bool) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if skip == nil || !skip(l) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// launched records the JVMs an Instance started: per component
// directory, a channel closed when the process has exited.
type launched struct {
	mu   sync.Mutex
	jvms map[string]<-chan struct{}
}

func (l *launched) add(dir string, exit <-chan struct{}) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jvms == nil {
		l.jvms = map[string]<-chan struct{}{}
	}
	l.jvms[dir] = exit
}

func (l *launched) get(dir string) (<-chan struct{}, bool) {
	if l == nil {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	exit, ok := l.jvms[dir]
	return exit, ok
}

// running reports whether c's JVM runs. One this Instance launched runs
// until the process it waits on has exited: the pid file and /proc, which
// [component.pid] reads, once took a JVM still starting for one that had
// exited (its pid file removed, the test bed lost it while it ran on).
// Others are looked up by their pid file.
func (in *Instance) running(c component) bool {
	if exit, ok := in.jvms.get(c.dir); ok {
		select {
		case <-exit:
			return false
		default:
			return true
		}
	}
	_, ok := c.pid()
	return ok
}

// exited describes a component whose JVM died during start-up, with the
// ends of its logs, and removes its pid file.
func exited(c component) error {
	_ = os.Remove(c.pidFile())
	logbackNoise := func(l string) bool { return strings.Contains(l, "|-INFO in") || strings.Contains(l, "|-WARN in") }
	return fmt.Errorf("the %s JVM of %s exited during start-up; last lines of %s:\n%s\nand of %s:\n%s",
		c.name, c.dir, c.outFile(), tail(c.outFile(), 20, logbackNoise),
		filepath.Join(c.rmqLogs(), c.kind+".log"), tail(filepath.Join(c.rmqLogs(), c.kind+".log"), 20, nil))
}

// stopOne stops c's JVM: SIGTERM, up to 60 s (a broker needs 10-20 s to
// shut down), then SIGKILL.
func (in *Instance) stopOne(c component) error {
	pid, ok := c.pid()
	if !ok {
		if _, err := os.Stat(c.pidFile()); err == nil {
			in.logf("%s: stale pid file removed (process gone)", c.name)
			_ = os.Remove(c.pidFile())
		} else {
			in.logf("%s: not started here; nothing to stop", c.name)
		}
		return nil
	}
	in.logf("stopping %s (pid %d) ...", c.name, pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !waitGone(pid, 60*time.Second) {
		in.logf("%s (pid %d) still running after 60 s; sending KILL", c.name, pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(pid, 10*time.Second) {
			return fmt.Errorf("%s (pid %d) would not exit", c.name, pid)
		}
	}
	_ = os.Remove(c.pidFile())
	in.logf("%s stopped", c.name)
	return nil
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// signal sends the broker c SIGKILL (and waits until it is gone), SIGSTOP
// or SIGCONT.
func (in *Instance) signal(c component, sig syscall.Signal) error {
	pid, ok := c.pid()
	if !ok {
		return fmt.Errorf("%s: not running from %s; nothing to %s", c.name, c.dir, verbOf(sig))
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("%s (pid %d): %w", c.name, pid, err)
	}
	switch sig {
	case syscall.SIGKILL:
		if !waitGone(pid, 10*time.Second) {
			return fmt.Errorf("%s (pid %d) survived SIGKILL", c.name, pid)
		}
		_ = os.Remove(c.pidFile())
		in.logf("%s (pid %d) killed", c.name, pid)
	case syscall.SIGSTOP:
		in.logf("%s (pid %d) paused", c.name, pid)
	case syscall.SIGCONT:
		in.logf("%s (pid %d) resumed", c.name, pid)
	}
	return nil
}

func verbOf(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "kill"
	case syscall.SIGSTOP:
		return "pause"
	default:
		return "resume"
	}
}

package rmqproc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
)

// TestMain installs the RocketMQ client's logger before any client starts:
// it is a process global that cannot be replaced safely later.
func TestMain(m *testing.M) {
	rmqlog.Install(slog.Default(), slog.LevelError)
	os.Exit(m.Run())
}

// The ports of this package's own instances: no test bed target uses them.
const (
	lifecycleNameServer = "127.0.0.1:30076"
	lifecycleBroker     = "127.0.0.1:30111"
	clusterNameServer   = "127.0.0.1:30276"
	clusterBrokers      = "broker-a=127.0.0.1:30311,broker-b=127.0.0.1:30411"
)

// requireJVMs skips t unless testbed.BrokerRestartEnv is 1: the tests
// start, crash and stop JVMs of their own (about 1 GiB of memory each).
func requireJVMs(t *testing.T) {
	t.Helper()
	if os.Getenv(testbed.BrokerRestartEnv) != "1" {
		t.Skipf("set %s=1 to let this test start, kill and stop RocketMQ JVMs of its own on ports 30076-30411 (docs/testing.md)", testbed.BrokerRestartEnv)
	}
}

func newInstance(t *testing.T, cluster bool) *rmqproc.Instance {
	t.Helper()
	cfg, err := rmqproc.FromEnv(cluster) // version, cache and extra settings of the environment
	if err != nil {
		t.Fatal(err)
	}
	cfg.Mode = rmqproc.ModeJar
	cfg.Log = testbed.LogWriter(t)
	if cluster {
		cfg.NameServer = clusterNameServer
		if cfg.Brokers, err = rmqproc.ParseBrokers(clusterBrokers); err != nil {
			t.Fatal(err)
		}
	} else {
		cfg.NameServer = lifecycleNameServer
		cfg.Brokers = []rmqproc.Broker{{Name: "broker-a", Addr: lifecycleBroker}}
	}
	in, err := rmqproc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Leftovers of an interrupted run, then an empty store.
	must(t, in.Stop(""))
	must(t, in.Wipe(""))
	t.Cleanup(func() {
		_ = in.Resume("")
		if err := in.Stop(""); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return in
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// procState returns the state letter of the JVM in pidFile (R, S, T, ...).
func procState(t *testing.T, pidFile string) string {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	must(t, err)
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat")
	must(t, err)
	s := string(stat)
	return s[strings.LastIndexByte(s, ')')+2:][:1]
}

// createTopic shows the name server routes a new topic to each broker.
func createTopic(t *testing.T, in *rmqproc.Instance) {
	t.Helper()
	cfg := in.Config()
	var addrs []string
	for _, b := range cfg.Brokers {
		addrs = append(addrs, b.Addr)
	}
	topic := testbed.Name(t, "rmqproc")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, testbed.CreateTopicOn(ctx, cfg.NameServer, addrs, topic, 2))
}

// TestLifecycle starts a name server and a broker of its own, then
// pauses, resumes, crashes, restarts, stops and wipes the broker.
func TestLifecycle(t *testing.T) {
	requireJVMs(t)
	in := newInstance(t, false)
	ctx := context.Background()
	pidFile := filepath.Join(in.Dir(), "broker.pid")

	must(t, in.Start(ctx, ""))
	if !in.Owns("") {
		t.Fatal("Owns is false after Start")
	}
	createTopic(t, in)
	conf, err := os.ReadFile(filepath.Join(in.Dir(), "conf", "broker.conf"))
	must(t, err)
	for _, want := range []string{"transactionOpBatchInterval=100", "listenPort=30111", "namesrvAddr=" + lifecycleNameServer, "brokerName=broker-a"} {
		if !bytes.Contains(conf, []byte("\n"+want+"\n")) {
			t.Errorf("broker.conf lacks %s", want)
		}
	}
	cmdline := func() string {
		b, _ := os.ReadFile(pidFile)
		c, _ := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/cmdline")
		return string(c)
	}()
	if !strings.Contains(cmdline, "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED") {
		t.Errorf("the broker's JVM runs without the sun.nio.ch export: %q", cmdline)
	}

	// A second Start finds everything running and only checks readiness.
	must(t, in.Start(ctx, ""))

	must(t, in.Pause(""))
	// The stop reaches every thread of the JVM within moments.
	deadline := time.Now().Add(5 * time.Second)
	for procState(t, pidFile) != "T" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if s := procState(t, pidFile); s != "T" {
		t.Errorf("paused broker in state %s, want T (stopped)", s)
	}
	must(t, in.Resume(""))
	if s := procState(t, pidFile); s == "T" {
		t.Error("resumed broker still stopped")
	}

	must(t, in.Kill(""))
	if in.Owns("") || listening(lifecycleBroker) {
		t.Fatal("the broker still runs after Kill")
	}
	if !listening(lifecycleNameServer) {
		t.Fatal("Kill took the name server down too")
	}
	var status bytes.Buffer
	statusOf := func() error {
		status.Reset()
		cfg := in.Config()
		cfg.Log = &status
		st, err := rmqproc.New(cfg)
		must(t, err)
		return st.Status("")
	}
	if err := statusOf(); !errors.Is(err, rmqproc.ErrNotRunning) || !strings.Contains(status.String(), "broker: not running") {
		t.Errorf("status after kill: %v\n%s", err, status.String())
	}
	if err := in.Wipe(""); err == nil {
		t.Error("Wipe while the name server runs")
	}

	t0 := time.Now()
	must(t, in.Start(ctx, ""))
	t.Logf("restart after the crash took %s", time.Since(t0).Round(time.Second))
	createTopic(t, in)
	if err := statusOf(); err != nil {
		t.Errorf("status after restart: %v\n%s", err, status.String())
	}

	must(t, in.Stop(""))
	if in.Owns("") || listening(lifecycleBroker) || listening(lifecycleNameServer) {
		t.Fatal("something still runs after Stop")
	}
	must(t, in.Wipe(""))
	if _, err := os.Stat(filepath.Join(in.Dir(), "store")); !os.IsNotExist(err) {
		t.Errorf("store left after Wipe: %v", err)
	}
}

// TestForeignPortRefused: on ports of its own an instance never reuses a
// process it did not start.
func TestForeignPortRefused(t *testing.T) {
	requireJVMs(t)
	in := newInstance(t, false)
	l, err := net.Listen("tcp", lifecycleNameServer)
	must(t, err)
	defer l.Close()
	err = in.Start(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("Start with the name server port taken: %v", err)
	}
}

// TestCluster starts a name server and two brokers, crashes one and
// starts it again.
func TestCluster(t *testing.T) {
	requireJVMs(t)
	in := newInstance(t, true)
	ctx := context.Background()
	must(t, in.Start(ctx, ""))
	createTopic(t, in)
	if err := in.Kill(""); err == nil {
		t.Fatal("Kill without a broker name in the cluster form")
	}
	must(t, in.Kill("broker-a"))
	if in.Owns("broker-a") || !in.Owns("broker-b") {
		t.Fatal("Kill broker-a: want broker-a down and broker-b up")
	}
	if listening("127.0.0.1:30311") || !listening("127.0.0.1:30411") {
		t.Fatal("Kill broker-a: want port 30311 closed and 30411 open")
	}
	must(t, in.Pause("broker-b"))
	must(t, in.Resume(""))
	must(t, in.Start(ctx, "broker-a"))
	if !in.Owns("") {
		t.Fatal("not every broker runs after Start broker-a")
	}
	createTopic(t, in)
	must(t, in.Stop("broker-b"))
	if !in.Owns("broker-a") || listening("127.0.0.1:"+strconv.Itoa(30411)) {
		t.Fatal("Stop broker-b: want broker-b down and broker-a up")
	}
}

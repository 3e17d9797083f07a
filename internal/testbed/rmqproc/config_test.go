package rmqproc

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func newTest(t *testing.T, cfg Config) (*Instance, error) {
	t.Helper()
	if cfg.Cache == "" {
		cfg.Cache = t.TempDir()
	}
	cfg.Log = io.Discard
	return New(cfg)
}

func TestConfigChecks(t *testing.T) {
	t.Parallel()
	single := func(ns, broker string) Config {
		return Config{NameServer: ns, Brokers: []Broker{{"broker-a", broker}}}
	}
	cluster := func(ns, brokers string) Config {
		bs, err := ParseBrokers(brokers)
		if err != nil {
			t.Fatal(err)
		}
		return Config{NameServer: ns, Brokers: bs, Cluster: true}
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // "" when valid
	}{
		{"default", single(DefaultNameServer, DefaultBroker), ""},
		{"own ports", single("127.0.0.1:19876", "127.0.0.1:20911"), ""},
		{"name server on the broker's fast port", single("127.0.0.1:20909", "127.0.0.1:20911"), "collides"},
		{"name server on the broker's HA port", single("127.0.0.1:20912", "127.0.0.1:20911"), "collides"},
		{"not host:port", single("127.0.0.1", DefaultBroker), "host:port"},
		{"broker port too low", single(DefaultNameServer, "127.0.0.1:2"), "between 3"},
		{"bad version", Config{NameServer: DefaultNameServer, Brokers: []Broker{{"b", DefaultBroker}}, Version: "5.3"}, "4.9.7"},
		{"bad mode", Config{NameServer: DefaultNameServer, Brokers: []Broker{{"b", DefaultBroker}}, Mode: "podman"}, "auto, docker or jar"},
		{"cluster default", cluster(DefaultClusterNameServer, DefaultClusterBrokers), ""},
		{"cluster of one", cluster(DefaultClusterNameServer, "broker-a=127.0.0.1:30911"), "two brokers"},
		{"cluster brokers too close", cluster(DefaultClusterNameServer, "broker-a=127.0.0.1:30911,broker-b=127.0.0.1:30914"), "at least 4 apart"},
		{"cluster on the default broker", cluster(DefaultClusterNameServer, "broker-a=127.0.0.1:10912,broker-b=127.0.0.1:31911"), "default broker"},
		{"cluster on the default name server", cluster(DefaultNameServer, DefaultClusterBrokers), "default name server"},
		{"cluster twice the same name", cluster(DefaultClusterNameServer, "broker-a=127.0.0.1:30911,broker-a=127.0.0.1:31911"), "two brokers named"},
		{"cluster with Docker", func() Config {
			c := cluster(DefaultClusterNameServer, DefaultClusterBrokers)
			c.Mode = ModeDocker
			return c
		}(), "jars"},
		{"stock", func() Config {
			c := single("127.0.0.1:18876", "127.0.0.1:19911")
			c.Stock = true
			return c
		}(), ""},
		{"stock on the default ports", func() Config {
			c := single(DefaultNameServer, DefaultBroker)
			c.Stock = true
			return c
		}(), "ports of its own"},
		{"stock with extra settings", func() Config {
			c := single("127.0.0.1:18876", "127.0.0.1:19911")
			c.Stock, c.ExtraConf = true, "/nonexistent.conf"
			return c
		}(), "no extra settings"},
		{"stock cluster", func() Config {
			c := cluster(DefaultClusterNameServer, DefaultClusterBrokers)
			c.Stock = true
			return c
		}(), "single broker"},
		{"missing extra conf", func() Config {
			c := single(DefaultNameServer, DefaultBroker)
			c.ExtraConf = "/nonexistent.conf"
			return c
		}(), "TXMSG_RMQ_EXTRA_CONF"},
	} {
		_, err := newTest(t, tc.cfg)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got error %v, want one containing %q", tc.name, err, tc.err)
		}
	}
}

// TestInstanceDirs pins the directory layout: pid files of instances that
// are running stay where earlier versions of the test bed wrote them.
func TestInstanceDirs(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	vdir := func(parts ...string) string {
		return filepath.Join(append([]string{cache, "rocketmq", "5.3.3"}, parts...)...)
	}
	in, err := newTest(t, Config{Cache: cache, Version: "5.3.3", NameServer: DefaultNameServer, Brokers: []Broker{{"x", DefaultBroker}}})
	if err != nil {
		t.Fatal(err)
	}
	if in.Dir() != vdir() || in.brokers[0].pidFile() != vdir("broker.pid") || in.brokers[0].brokerName != "broker-a" {
		t.Errorf("default ports: dir %s, broker pid file %s, brokerName %s", in.Dir(), in.brokers[0].pidFile(), in.brokers[0].brokerName)
	}
	if !in.defaultPorts() || in.exclusive() {
		t.Error("the default ports reuse a running broker")
	}
	in, err = newTest(t, Config{Cache: cache, Version: "5.3.3", NameServer: "127.0.0.1:14876", Brokers: []Broker{{"x", "127.0.0.1:15911"}}})
	if err != nil {
		t.Fatal(err)
	}
	if in.Dir() != vdir("ports-14876-15911") || !in.exclusive() {
		t.Errorf("own ports: dir %s, exclusive %v", in.Dir(), in.exclusive())
	}
	if m, err := in.mode(); err != nil || m != ModeJar {
		t.Errorf("own ports run from the jars; mode %q, %v", m, err)
	}
	bs, _ := ParseBrokers(DefaultClusterBrokers)
	in, err = newTest(t, Config{Cache: cache, Version: "5.3.3", NameServer: DefaultClusterNameServer, Brokers: bs, Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	if in.Dir() != vdir("cluster-29876") || in.ns.pidFile() != vdir("cluster-29876", "namesrv.pid") ||
		in.brokers[1].pidFile() != vdir("cluster-29876", "broker-b", "broker.pid") || in.brokers[1].brokerName != "broker-b" {
		t.Errorf("cluster: dir %s, broker-b pid file %s", in.Dir(), in.brokers[1].pidFile())
	}
	if err := in.Kill(""); err == nil || !strings.Contains(err.Error(), "broker name") {
		t.Errorf("kill without a broker name in the cluster form: %v", err)
	}
	if _, err := in.targets("broker-c"); err == nil {
		t.Error("broker-c is not a broker of the cluster")
	}
}

func TestFilterConf(t *testing.T) {
	t.Parallel()
	in := &Instance{cfg: Config{Version: "4.3.2"}}
	out, dropped := in.filterConf([]string{
		"# a comment",
		"brokerName=broker-a",
		"mappedFileSizeCommitLog=1048576",
		"transactionOpBatchInterval=100",
		"",
	}, []string{"brokerName", "mapedFileSizeCommitLog"})
	want := []string{
		"# a comment",
		"brokerName=broker-a",
		"# spelt mapedFileSizeCommitLog in RocketMQ 4.3.2:",
		"mapedFileSizeCommitLog=1048576",
		"# not a setting of RocketMQ 4.3.2, left out: transactionOpBatchInterval=100",
		"",
	}
	if strings.Join(out, "\n") != strings.Join(want, "\n") {
		t.Errorf("filtered:\n%s\nwant:\n%s", strings.Join(out, "\n"), strings.Join(want, "\n"))
	}
	if strings.Join(dropped, ",") != "transactionOpBatchInterval" {
		t.Errorf("dropped %v", dropped)
	}
	if out, dropped := in.filterConf([]string{"anything=1"}, nil); len(out) != 1 || dropped != nil {
		t.Error("without the version's keys every setting stays")
	}
}

func TestParseBrokers(t *testing.T) {
	t.Parallel()
	bs, err := ParseBrokers("broker-a=127.0.0.1:30911, broker-b=127.0.0.1:31911")
	if err != nil || len(bs) != 2 || bs[1] != (Broker{"broker-b", "127.0.0.1:31911"}) {
		t.Errorf("got %v, %v", bs, err)
	}
	if _, err := ParseBrokers("127.0.0.1:30911"); err == nil {
		t.Error("an address without a name is not a broker")
	}
}

func TestFromEnvRefusesRemovedVariables(t *testing.T) {
	t.Setenv("TXMSG_RMQ_BROKER_PORT", "20911")
	if _, err := FromEnv(false); err == nil || !strings.Contains(err.Error(), "TXMSG_BROKER=") {
		t.Errorf("TXMSG_RMQ_BROKER_PORT set: %v", err)
	}
}

// The HA form gives each master a slave SlavePortOffset above it, with a
// directory of its own, and refuses ports a slave would share.
func TestHAForm(t *testing.T) {
	t.Parallel()
	bs, err := ParseBrokers(DefaultHABrokers)
	if err != nil {
		t.Fatal(err)
	}
	in, err := newTest(t, Config{NameServer: DefaultHANameServer, Brokers: bs, HA: ReplicationSync})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range in.brokers {
		got = append(got, b.name+"@"+b.addr()+"/"+b.role+"/"+filepath.Base(b.dir))
	}
	want := []string{
		"broker-a@127.0.0.1:21911/SYNC_MASTER/broker-a", "broker-a-s@127.0.0.1:21921/SLAVE/broker-a-s",
		"broker-b@127.0.0.1:22911/SYNC_MASTER/broker-b", "broker-b-s@127.0.0.1:22921/SLAVE/broker-b-s",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("brokers:\n got %v\nwant %v", got, want)
	}
	if !in.cfg.Cluster || filepath.Base(in.dir) != "ha-20876" {
		t.Fatalf("cluster %v, dir %s", in.cfg.Cluster, in.dir)
	}
	if _, err := in.targets("broker-b-s"); err != nil {
		t.Fatal(err)
	}
	bs, _ = ParseBrokers("broker-a=127.0.0.1:21911,broker-b=127.0.0.1:21921")
	if _, err := newTest(t, Config{NameServer: DefaultHANameServer, Brokers: bs, HA: ReplicationAsync}); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("a master on another master's slave ports: err %v, want an overlap", err)
	}
	if _, err := newTest(t, Config{NameServer: DefaultHANameServer, Brokers: bs[:1], HA: "semi"}); err == nil || !strings.Contains(err.Error(), "async, sync or controller") {
		t.Fatalf("replication semi: err %v", err)
	}
}

// After a Promote the group's roles are swapped until Rebuild or Wipe:
// the slave's broker starts as the master (brokerId 0), the old master's
// as its slave, and the name server is expected to route to the slave's
// address. Only the marker file is written here; nothing starts.
func TestSwappedGroupRoles(t *testing.T) {
	t.Parallel()
	// Ports of its own: Wipe refuses a broker port that something serves.
	bs, err := ParseBrokers("broker-a=127.0.0.1:41911,broker-b=127.0.0.1:42911")
	if err != nil {
		t.Fatal(err)
	}
	in, err := newTest(t, Config{NameServer: "127.0.0.1:40876", Brokers: bs, HA: ReplicationAsync})
	if err != nil {
		t.Fatal(err)
	}
	roles := func() string {
		var out []string
		for _, b := range in.brokers {
			id, role := in.roleOf(b)
			out = append(out, fmt.Sprintf("%s=%d/%s", b.name, id, role))
		}
		return strings.Join(out, " ")
	}
	masters := func() string {
		var out []string
		for _, m := range in.Masters() {
			out = append(out, m.Name+"@"+m.Addr)
		}
		return strings.Join(out, " ")
	}
	if got, want := roles(), "broker-a=0/ASYNC_MASTER broker-a-s=1/SLAVE broker-b=0/ASYNC_MASTER broker-b-s=1/SLAVE"; got != want {
		t.Fatalf("roles %s, want %s", got, want)
	}
	if err := os.MkdirAll(in.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in.swappedFile("broker-a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := roles(), "broker-a=1/SLAVE broker-a-s=0/ASYNC_MASTER broker-b=0/ASYNC_MASTER broker-b-s=1/SLAVE"; got != want {
		t.Fatalf("swapped roles %s, want %s", got, want)
	}
	if got, want := masters(), "broker-a@127.0.0.1:41921 broker-b@127.0.0.1:42911"; got != want {
		t.Fatalf("masters %s, want %s", got, want)
	}
	if in.MasterOf("broker-a") != "broker-a-s" || in.SlaveOf("broker-a") != "broker-a" || in.SlaveAddr("broker-a") != "127.0.0.1:41911" {
		t.Fatalf("group broker-a: master %s, slave %s at %s", in.MasterOf("broker-a"), in.SlaveOf("broker-a"), in.SlaveAddr("broker-a"))
	}
	if !in.Promoted("broker-a") || in.Promoted("broker-b") {
		t.Fatal("Promoted disagrees with the marker")
	}
	if err := in.Wipe(""); err != nil {
		t.Fatal(err)
	}
	if in.Promoted("broker-a") {
		t.Fatal("Wipe of the whole form left the roles swapped")
	}
}

// The controller form: a directory of its own, the controller's lines in
// the name server's config and controller mode in every broker's (none
// with a fixed role), RocketMQ 5.1 or later, and the controller's port
// clear of the brokers'. Without a name server to ask, the configured
// roles stand. Nothing starts.
func TestControllerForm(t *testing.T) {
	t.Parallel()
	bs, err := ParseBrokers("broker-a=127.0.0.1:43911,broker-b=127.0.0.1:44911")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NameServer: "127.0.0.1:45876", Brokers: bs, HA: ReplicationController, Version: "5.3.3"}
	in, err := newTest(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(in.dir) != "ha-controller-45876" || in.controllerAddr() != "127.0.0.1:45878" {
		t.Fatalf("dir %s, controller %s", in.dir, in.controllerAddr())
	}
	if got, want := in.MasterOf("broker-a")+" "+in.SlaveOf("broker-a"), "broker-a broker-a-s"; got != want {
		t.Fatalf("with no name server to ask: %s, want %s", got, want)
	}
	if err := in.Promote(context.Background(), "broker-a"); err == nil || !strings.Contains(err.Error(), "fails over by itself") {
		t.Fatalf("promote on the controller form: %v", err)
	}
	// The config files.
	for _, c := range append([]component{in.ns}, in.brokers...) {
		if err := in.writeConfigs(c); err != nil {
			t.Fatal(err)
		}
	}
	read := func(c component) string {
		b, err := os.ReadFile(filepath.Join(c.confDir(), c.kind+".conf"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ns := read(in.ns)
	for _, want := range []string{"enableControllerInNamesrv=true", "controllerDLegerPeers=n0-127.0.0.1:45878", "enableElectUncleanMaster=false",
		"controllerStorePath=" + in.controllerStore()} {
		if !strings.Contains(ns, want+"\n") {
			t.Fatalf("name server config lacks %s:\n%s", want, ns)
		}
	}
	for _, b := range in.brokers {
		conf := read(b)
		for _, want := range []string{"enableControllerMode=true", "controllerAddr=127.0.0.1:45878", "allAckInSyncStateSet=true", "brokerId=-1", "brokerRole=SLAVE"} {
			if v, _ := lastSetting(filepath.Join(b.confDir(), "broker.conf"), strings.Split(want, "=")[0]); v != strings.Split(want, "=")[1] {
				t.Fatalf("%s: %s is %q, want %s:\n%s", b.name, strings.Split(want, "=")[0], v, want, conf)
			}
		}
	}

	old := cfg
	old.Version = "4.9.7"
	if _, err := newTest(t, old); err == nil || !strings.Contains(err.Error(), "5.1 or later") {
		t.Fatalf("controller form on 4.9.7: %v", err)
	}
	// Without a version, the controller form runs the one pinned for
	// it, the other forms ROCKETMQ_VERSION.
	pinned := func(key string) string {
		v, err := pinnedVersion(in.cfg.Root, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	unset := cfg
	unset.Version = ""
	in, err = newTest(t, unset)
	if err != nil {
		t.Fatal(err)
	}
	if want := pinned("ROCKETMQ_CONTROLLER_VERSION"); in.cfg.Version != want {
		t.Fatalf("controller form without a version runs %s, want %s", in.cfg.Version, want)
	}
	unset.HA = ReplicationSync
	in, err = newTest(t, unset)
	if err != nil {
		t.Fatal(err)
	}
	if want := pinned("ROCKETMQ_VERSION"); in.cfg.Version != want {
		t.Fatalf("sync form without a version runs %s, want %s", in.cfg.Version, want)
	}
	if pinned("ROCKETMQ_VERSION") == pinned("ROCKETMQ_CONTROLLER_VERSION") {
		t.Log("the two pinned versions are equal: the check above cannot tell them apart")
	}

	clash := cfg
	clash.NameServer = "127.0.0.1:43907" // controller on 43909, within broker-a's 43909-43912
	if _, err := newTest(t, clash); err == nil || !strings.Contains(err.Error(), "controller's port") {
		t.Fatalf("controller port on a broker's: %v", err)
	}
}

// TestRunningFollowsTheLaunchedProcess: a JVM this Instance launched runs
// until its process exits, whatever its pid file says (none here, as when
// it was read at the wrong moment); a component it did not launch is
// looked up by its pid file.
func TestRunningFollowsTheLaunchedProcess(t *testing.T) {
	in, err := newTest(t, Config{NameServer: "127.0.0.1:47876", Brokers: []Broker{{"broker-a", "127.0.0.1:47911"}}, Version: "5.3.3"})
	if err != nil {
		t.Fatal(err)
	}
	c := in.brokers[0]
	if in.running(c) {
		t.Fatal("a broker never launched and without a pid file runs")
	}
	cmd := exec.Command("sleep", "0.5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	in.jvms.add(c.dir, exit)
	if _, ok := c.pid(); ok {
		t.Fatal("the component has no pid file, yet pid() found it")
	}
	if !in.running(c) {
		t.Fatal("a launched process that has not exited does not run")
	}
	<-exit
	if in.running(c) {
		t.Fatal("a launched process that exited runs")
	}
}

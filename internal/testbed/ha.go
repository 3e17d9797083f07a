package testbed

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"

	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
)

// HAEnv names the replication of the HA form a run is made for: async or
// sync ([rmqproc.Replication]). make test-ha sets it, with
// TXMSG_HA_NAMESRV and TXMSG_HA_BROKERS naming the name server and the
// masters (default [rmqproc.DefaultHANameServer] and
// [rmqproc.DefaultHABrokers]).
const HAEnv = "TXMSG_HA"

// HA is the HA form a test runs on.
type HA struct {
	// Replication is the masters' replication: async, sync or
	// controller (the controller elects each group's master).
	Replication rmqproc.Replication
	// Masters are the masters (broker-a, broker-b); the slave of each is
	// named Name+[rmqproc.SlaveSuffix].
	Masters []rmqproc.Broker
	// Procs are the processes, for Kill, Pause, Resume and Start.
	Procs *rmqproc.Instance
}

// RequireReplication skips t unless the HA form replicates as want (make
// test-ha runs the tests on each form in turn); why says what the test
// needs it for.
func (h *HA) RequireReplication(t testing.TB, want rmqproc.Replication, why string) {
	t.Helper()
	if h.Replication != want {
		t.Skipf("needs %s replication, %s (make test-ha runs it on that form); this form replicates %s", want, why, h.Replication)
	}
}

// Slave returns the name of master's slave.
func (h *HA) Slave(master string) string { return master + rmqproc.SlaveSuffix }

// Kill SIGKILLs broker name (a master or a slave) and fails t when it
// cannot.
func (h *HA) Kill(t testing.TB, name string) {
	t.Helper()
	if err := h.Procs.Kill(name); err != nil {
		t.Fatal(err)
	}
}

// Start starts broker name again and waits until every master takes
// messages (and a slave replicates); it fails t when it cannot.
func (h *HA) Start(t testing.TB, name string) {
	t.Helper()
	if err := h.Procs.Start(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}

// Pause SIGSTOPs broker name (a master or a slave): it holds its
// connections and answers nothing; for a slave, replication stops.
func (h *HA) Pause(t testing.TB, name string) {
	t.Helper()
	if err := h.Procs.Pause(name); err != nil {
		t.Fatal(err)
	}
}

// Promote makes the failover by hand after master's disk is lost
// ([rmqproc.Instance.Promote]): master SIGKILLed, its store deleted, its
// slave restarted as the group's master. Restore rebuilds the group.
func (h *HA) Promote(t testing.TB, master string) {
	t.Helper()
	if err := h.Procs.Promote(context.Background(), master); err != nil {
		t.Fatal(err)
	}
}

// SlaveActingMaster turns slave-acting-master on or off for the group
// master ([rmqproc.Instance.SetSlaveActingMaster]); Restore turns it off.
func (h *HA) SlaveActingMaster(t testing.TB, master string, on bool) {
	t.Helper()
	if err := h.Procs.SetSlaveActingMaster(context.Background(), master, on); err != nil {
		t.Fatal(err)
	}
}

// Restore puts the HA form back as make test-ha started it: a group with
// slave-acting-master has it turned off (its brokers restarted), a group
// whose slave was promoted is rebuilt from empty stores (its topics are gone),
// a paused broker is resumed, and whatever broker is not running (a test
// that failed between a kill and its restart leaves one down) is started.
func (h *HA) Restore(t testing.TB) {
	t.Helper()
	_ = h.Procs.Resume("")
	for _, m := range h.Masters {
		if h.Procs.SlaveActingMaster(m.Name) {
			h.SlaveActingMaster(t, m.Name, false)
		}
		if h.Procs.Promoted(m.Name) {
			if err := h.Procs.Rebuild(context.Background(), m.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = h.Procs.Resume("")
	if !h.Procs.Owns("") {
		h.Start(t, "")
	}
}

// haNameServer returns the HA form's name server in a run made for it,
// else "".
func haNameServer() string {
	if os.Getenv(HAEnv) == "" {
		return ""
	}
	if ns := os.Getenv("TXMSG_HA_NAMESRV"); ns != "" {
		return ns
	}
	return rmqproc.DefaultHANameServer
}

// haMasters returns the HA form's masters ([rmqproc.HAFromEnv]).
func haMasters() []rmqproc.Broker {
	cfg, err := rmqproc.HAFromEnv()
	if err != nil {
		return nil
	}
	return cfg.Brokers
}

// createOnHA creates topic on both brokers of every group of the HA form
// and waits until the name server routes it to every group. Both: a slave
// copies its master's topics only once a minute, and until then answers a
// pull of a new topic with "topic not exist", so a consumer could not read
// a dead master's queues from it; and in the controller form either broker
// of a group may be its master.
func createOnHA(ctx context.Context, ns, topic string, queues int) error {
	adm, err := sharedAdmin(ns)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	masters := haMasters()
	for _, m := range masters {
		host, port, err := net.SplitHostPort(m.Addr)
		if err != nil {
			return err
		}
		p, _ := strconv.Atoi(port)
		for _, addr := range []string{m.Addr, net.JoinHostPort(host, strconv.Itoa(p+rmqproc.SlavePortOffset))} {
			if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(addr),
				admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues)); err != nil {
				return fmt.Errorf("create topic %s on %s of the group %s: %w", topic, addr, m.Name, err)
			}
		}
	}
	return waitRouted(ctx, adm, topic, len(masters))
}

// RequireHAController is [RequireHA] for the controller form alone
// (TXMSG_HA=controller: RocketMQ 5's automatic failover), whose masters
// the controller elects; t skips on the other forms.
func RequireHAController(t *testing.T) *HA {
	t.Helper()
	return requireHA(t, haController)
}

// RequireHAAny is [RequireHA] for a test that runs on every HA form, the
// controller form included: it acts on a group's current master
// ([rmqproc.Instance.MasterOf]), whoever elected it.
func RequireHAAny(t *testing.T) *HA {
	t.Helper()
	return requireHA(t, haAny)
}

// Which HA forms a test runs on.
const (
	haByHand = iota
	haController
	haAny
)

// Resume SIGCONTs broker name and fails t when it cannot.
func (h *HA) Resume(t testing.TB, name string) {
	t.Helper()
	if err := h.Procs.Resume(name); err != nil {
		t.Fatal(err)
	}
}

// RequireHA skips t unless [HAEnv] is set, checks that the HA form's
// processes run and were started by the test bed, and points t and its
// child processes at it: TXMSG_NAMESRV becomes its name server and
// TXMSG_BROKER broker-a, and [Topic] creates topics on every master. It
// uses t.Setenv: such tests cannot be parallel. A run with [HAEnv] set is
// for such tests alone: the others skip (see [SpecialRun]).
//
// The tests written for the forms whose failover is made by hand skip on
// the controller form, where the controller moves a group's master by
// itself: those call RequireHAController, and those for every form
// RequireHAAny.
func RequireHA(t *testing.T) *HA {
	t.Helper()
	return requireHA(t, haByHand)
}

func requireHA(t *testing.T, forms int) *HA {
	t.Helper()
	if os.Getenv(HAEnv) == "" {
		t.Skipf("needs the HA form (two master/slave groups it may kill): set %s=async or sync, with TXMSG_HA_NAMESRV and TXMSG_HA_BROKERS naming it; make test-ha starts one and does (docs/testing.md)", HAEnv)
	}
	declare(t, haRun)
	cfg, err := rmqproc.HAFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if controller := cfg.HA == rmqproc.ReplicationController; forms != haAny && controller != (forms == haController) {
		if forms == haController {
			t.Skipf("needs the controller form (TXMSG_HA=controller, RocketMQ 5's automatic failover; make test-ha runs it); this form replicates %s", cfg.HA)
		}
		t.Skip("written for a failover by hand; on the controller form the controller moves a group's master by itself and the tests of RequireHAController run instead")
	}
	cfg.Log = LogWriter(t)
	in, err := rmqproc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TXMSG_NAMESRV", cfg.NameServer)
	t.Setenv("TXMSG_BROKER", cfg.Brokers[0].Addr)
	RequireBroker(t)
	if !in.Owns("") {
		t.Fatalf("the HA form of %s is not running, or was not started by the test bed from %s: start it with scripts/rocketmq.sh --ha start (or --ha-sync, --ha-controller)",
			cfg.NameServer, in.Dir())
	}
	return &HA{Replication: in.Config().HA, Masters: in.Config().Brokers, Procs: in}
}

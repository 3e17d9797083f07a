package rmqproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/txmsg/txmsg/internal/rmqwire"
)

// In the HA form a group's two brokers may swap roles: [Instance.Promote]
// makes the slave the master (a failover). A marker file in the
// instance's directory, swapped-<brokerName>, records it, so that every
// later start of either broker writes its configuration in its current
// role; Wipe of the whole form and [Instance.Rebuild] delete it.

func (in *Instance) swappedFile(brokerName string) string {
	return filepath.Join(in.dir, "swapped-"+brokerName)
}

func (in *Instance) swapped(brokerName string) bool {
	if in.cfg.HA == "" {
		return false
	}
	_, err := os.Stat(in.swappedFile(brokerName))
	return err == nil
}

// roleOf returns the brokerId and brokerRole c starts with: its own, or
// in a swapped group the other broker's. In the controller form it is the
// role the name server routes c in now (the controller elected it), or
// its configured one while the name server routes no master of the group.
func (in *Instance) roleOf(c component) (int, string) {
	if c.role != "" && in.cfg.HA == ReplicationController {
		if addr, ok := in.electedMaster(c.brokerName); ok {
			if addr == c.addr() {
				return 0, in.masterRole()
			}
			return 1, "SLAVE"
		}
		return c.brokerID, c.role
	}
	if c.role == "" || !in.swapped(c.brokerName) {
		return c.brokerID, c.role
	}
	if c.role == "SLAVE" {
		return 0, in.masterRole()
	}
	return 1, "SLAVE"
}

// masterRole is the brokerRole of the HA form's masters.
func (in *Instance) masterRole() string {
	// A master of the controller form acknowledges once its in-sync set
	// has a message: the broker reports itself as SYNC_MASTER.
	if in.cfg.HA == ReplicationSync || in.cfg.HA == ReplicationController {
		return "SYNC_MASTER"
	}
	return "ASYNC_MASTER"
}

func isSlave(role string) bool { return role == "SLAVE" }

// group returns the broker that is the master of the HA form's group
// named brokerName now, and the one that is its slave.
func (in *Instance) group(brokerName string) (master, slave component, err error) {
	if in.cfg.HA == "" {
		return master, slave, errors.New("promote and rebuild are for the HA form (-ha)")
	}
	var found int
	for _, b := range in.brokers {
		if b.brokerName != brokerName {
			continue
		}
		found++
		if _, role := in.roleOf(b); isSlave(role) {
			slave = b
		} else {
			master = b
		}
	}
	if found != 2 {
		return master, slave, fmt.Errorf("no group named %q in the HA form (brokers: %s)", brokerName, in.brokerSummary())
	}
	return master, slave, nil
}

// MasterOf and SlaveOf return the name of the broker that is the master
// (the slave) of the group brokerName now: broker-a and broker-a-s, or the
// other way round after a Promote.
func (in *Instance) MasterOf(brokerName string) string {
	m, _, _ := in.group(brokerName)
	return m.name
}

// SlaveOf: see [Instance.MasterOf].
func (in *Instance) SlaveOf(brokerName string) string {
	_, s, _ := in.group(brokerName)
	return s.name
}

// SlaveAddr returns the address of the slave of the group brokerName now.
func (in *Instance) SlaveAddr(brokerName string) string {
	_, s, _ := in.group(brokerName)
	return s.addr()
}

// Masters returns the masters the name server should route to: the
// configured brokers, except that in the HA form a group whose roles
// were swapped has its master at the other address. Nil for the single
// broker.
func (in *Instance) Masters() []Broker { return in.brokerList() }

// Promoted reports whether the group brokerName's roles are swapped: its
// configured slave is its master.
func (in *Instance) Promoted(brokerName string) bool { return in.swapped(brokerName) }

// Promote is the failover an operator makes by hand when the disk of a
// master of the HA form is lost: the group brokerName's master is
// SIGKILLed if it runs and its store is deleted; its slave is SIGKILLed
// too (a paused one included) and started again as the group's master
// (brokerId 0, the form's master role) on its own port and store. The
// group then holds what the slave had received and nothing more: under
// asynchronous replication the messages the master had acknowledged but
// not yet sent to its slave (all of them while the slave was paused) are
// gone. Promote waits until the name server routes a message to the new
// master. Under asynchronous replication the old master stays down; a
// later Start starts it as the new master's slave, from an empty store (a
// replacement machine). Under synchronous replication, whose master takes
// no send without a slave, Promote starts that replacement itself. A
// second Promote swaps the roles back. Rebuild (or Wipe of the whole form)
// puts the group back as it was configured, empty.
func (in *Instance) Promote(ctx context.Context, brokerName string) error {
	m, s, err := in.group(brokerName)
	if err != nil {
		return err
	}
	if in.cfg.HA == ReplicationController {
		return errors.New("the controller form fails over by itself: kill or pause the master, and the controller elects its slave")
	}
	if mode, err := in.mode(); err != nil {
		return err
	} else if mode != ModeJar {
		return fmt.Errorf("promote is for the jar path (mode %s)", mode)
	}
	for _, c := range []component{m, s} {
		if _, ok := c.pid(); ok {
			if err := in.signal(c, syscall.SIGKILL); err != nil {
				return err
			}
		}
	}
	if err := in.Wipe(m.name); err != nil {
		return err
	}
	if in.swapped(brokerName) {
		err = os.Remove(in.swappedFile(brokerName))
	} else {
		err = os.WriteFile(in.swappedFile(brokerName), []byte(s.name+" is the master of "+brokerName+"\n"), 0o644)
	}
	if err != nil {
		return err
	}
	in.logf("%s's store deleted (a lost disk); starting %s as the master of %s", m.name, s.name, brokerName)
	if in.cfg.HA == ReplicationSync {
		// A synchronous master takes no send until a slave copies it
		// (inSyncReplicas=2): the replacement starts with it.
		in.logf("synchronous replication: %s starts again at once, as the slave of %s", m.name, s.name)
		return in.Start(ctx, "")
	}
	return in.Start(ctx, s.name)
}

// Rebuild undoes [Instance.Promote]: it stops the group brokerName,
// deletes both stores and starts its master and slave afresh, in their
// configured roles. Everything the group stored is gone; topics are
// created again by whoever needs them.
func (in *Instance) Rebuild(ctx context.Context, brokerName string) error {
	m, s, err := in.group(brokerName)
	if err != nil {
		return err
	}
	if in.cfg.HA == ReplicationController {
		return errors.New("rebuild undoes promote, which the controller form has not: stop, wipe and start the form instead")
	}
	for _, c := range []component{s, m} {
		if _, ok := c.pid(); ok {
			if err := in.signal(c, syscall.SIGKILL); err != nil {
				return err
			}
		}
	}
	for _, c := range []component{m, s} {
		if err := in.Wipe(c.name); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(in.swappedFile(brokerName)); err != nil {
		return err
	}
	m, s, _ = in.group(brokerName)
	in.logf("rebuilding %s: %s and %s from empty stores", brokerName, m.name, s.name)
	if err := in.Start(ctx, m.name); err != nil {
		return err
	}
	return in.Start(ctx, s.name)
}

// controllerAddr is the controller of the controller form: on the name
// server's host, [ControllerPortOffset] above its port.
func (in *Instance) controllerAddr() string {
	return net.JoinHostPort(in.nsHost, strconv.Itoa(in.ns.port+ControllerPortOffset))
}

// controllerStore is the controller's log (the DLedger store): which
// broker of each group is the master, and the in-sync sets. Wipe of the
// whole form deletes it.
func (in *Instance) controllerStore() string { return filepath.Join(in.ns.storeDir(), "controller") }

// electedMaster returns the address the name server routes the group
// brokerName's master at (brokerId 0): in the controller form the broker
// the controller elected. False when the name server does not answer
// within 2 s or routes no master of the group.
func (in *Instance) electedMaster(brokerName string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ci, err := rmqwire.Cluster(ctx, in.cfg.NameServer, false)
	if err != nil {
		return "", false
	}
	addr := ci.BrokerAddrTable[brokerName].Master()
	return addr, addr != ""
}

// waitElected waits until the name server routes a master of the group
// brokerName (the controller elected one), failing early when c, the
// broker being waited on, exits.
func (in *Instance) waitElected(ctx context.Context, brokerName string, c component) error {
	for {
		if addr, ok := in.electedMaster(brokerName); ok {
			in.logf("the controller elected %s the master of %s", addr, brokerName)
			return nil
		}
		if !in.running(c) {
			return exited(c)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the controller elected no master of %s: %w; logs: %s", brokerName, ctx.Err(), in.logsHint())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Replicas asks the controller of the controller form for the group
// brokerName's elected master and in-sync set.
func (in *Instance) Replicas(ctx context.Context, brokerName string) (*rmqwire.Replicas, error) {
	if in.cfg.HA != ReplicationController {
		return nil, errors.New("replicas are the controller form's (-ha-controller)")
	}
	return rmqwire.ReplicaInfo(ctx, in.controllerAddr(), false, brokerName)
}

// waitInSync waits until the controller counts both brokers of the group
// brokerName in its in-sync set, so that it can elect the slave when the
// master fails; slave is the broker that joins.
func (in *Instance) waitInSync(ctx context.Context, brokerName string, slave component) error {
	var last string
	for {
		r, err := in.Replicas(ctx, brokerName)
		if err == nil && len(r.SyncStateSet) >= 2 {
			in.logf("%s is in the in-sync set of %s %v (master epoch %d)", slave.name, brokerName, r.SyncStateSet, r.MasterEpoch)
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("in-sync set %v", r.SyncStateSet)
		}
		if !in.running(slave) {
			return exited(slave)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not join the in-sync set of %s (%s): %w; logs: %s", slave.name, brokerName, last, ctx.Err(), slave.logDir())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// NameAt returns the name of the broker of the form listening at addr, or
// "".
func (in *Instance) NameAt(addr string) string {
	for _, b := range in.brokers {
		if b.addr() == addr {
			return b.name
		}
	}
	return ""
}

// actingFile marks the group brokerName of the HA form as running RocketMQ
// 5's slave-acting-master (RIP-32): [Instance.SetSlaveActingMaster].
func (in *Instance) actingFile(brokerName string) string {
	return filepath.Join(in.dir, "acting-"+brokerName)
}

// slaveActing reports whether the group brokerName runs with
// slave-acting-master.
func (in *Instance) slaveActing(brokerName string) bool {
	if in.cfg.HA != ReplicationAsync && in.cfg.HA != ReplicationSync {
		return false
	}
	_, err := os.Stat(in.actingFile(brokerName))
	return err == nil
}

// SetSlaveActingMaster turns RocketMQ 5's slave-acting-master (RIP-32) on
// or off for both brokers of the group brokerName of the HA form
// (asynchronous or synchronous replication) and restarts the group with
// it: enableSlaveActingMaster=true and enableRemoteEscape=true. With it,
// while the group's master is gone, its slave runs what only a master
// runs: it takes the half messages it holds from the master's store and
// sends them, as half messages, to the master of another group
// (escaping), which checks them back, and does the same with timer
// messages that come due. The group's brokers are SIGKILLed and started
// again (the master first); their stores are kept. Wipe of the whole form
// turns it off.
func (in *Instance) SetSlaveActingMaster(ctx context.Context, brokerName string, on bool) error {
	if in.cfg.HA != ReplicationAsync && in.cfg.HA != ReplicationSync {
		return errors.New("slave-acting-master is for the HA form with asynchronous or synchronous replication")
	}
	if strings.HasPrefix(in.cfg.Version, "4.") {
		return fmt.Errorf("slave-acting-master needs RocketMQ 5 (TXMSG_RMQ_VERSION is %s)", in.cfg.Version)
	}
	m, s, err := in.group(brokerName)
	if err != nil {
		return err
	}
	if on == in.slaveActing(brokerName) {
		return nil
	}
	for _, c := range []component{s, m} {
		if _, ok := c.pid(); ok {
			if err := in.signal(c, syscall.SIGKILL); err != nil {
				return err
			}
		}
	}
	if on {
		err = os.WriteFile(in.actingFile(brokerName), []byte(brokerName+" runs with enableSlaveActingMaster and enableRemoteEscape\n"), 0o644)
	} else {
		err = os.Remove(in.actingFile(brokerName))
	}
	if err != nil {
		return err
	}
	in.logf("%s: slave-acting-master %s; starting %s and %s again", brokerName, map[bool]string{true: "on", false: "off"}[on], m.name, s.name)
	if err := in.Start(ctx, m.name); err != nil {
		return err
	}
	return in.Start(ctx, s.name)
}

// SlaveActingMaster reports whether the group brokerName runs with
// slave-acting-master ([Instance.SetSlaveActingMaster]).
func (in *Instance) SlaveActingMaster(brokerName string) bool { return in.slaveActing(brokerName) }

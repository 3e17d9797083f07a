package rmqproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
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
// in a swapped group the other broker's.
func (in *Instance) roleOf(c component) (int, string) {
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
	if in.cfg.HA == ReplicationSync {
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

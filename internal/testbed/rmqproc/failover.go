package rmqproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// promotedRole is the role of a slave that [Instance.Promote] made its
// group's master. Its group has no slave left, so a synchronous master
// would fail every send: a promoted slave replicates to no one.
const promotedRole = "ASYNC_MASTER"

// promotedFile marks a slave of the HA form that Promote made its group's
// master; the configuration written at its next start says so. Wipe and
// Rebuild delete it.
func (c component) promotedFile() string { return filepath.Join(c.dir, "promoted") }

func (c component) promoted() bool {
	if c.role != "SLAVE" {
		return false
	}
	_, err := os.Stat(c.promotedFile())
	return err == nil
}

// effectiveRole returns the brokerId and brokerRole c starts with.
func (c component) effectiveRole() (int, string) {
	if c.promoted() {
		return 0, promotedRole
	}
	return c.brokerID, c.role
}

// group returns the master of the HA form named master and its slave.
func (in *Instance) group(master string) (m, s component, err error) {
	if in.cfg.HA == "" {
		return m, s, errors.New("promote and rebuild are for the HA form (-ha)")
	}
	var found int
	for _, b := range in.brokers {
		switch {
		case b.name == master && b.role != "SLAVE":
			m = b
			found++
		case b.brokerName == master && b.role == "SLAVE":
			s = b
			found++
		}
	}
	if found != 2 {
		return m, s, fmt.Errorf("no master named %q in the HA form (masters: %s)", master, in.brokerSummary())
	}
	return m, s, nil
}

// Masters returns the masters the name server should route to: the
// configured brokers, except that in the HA form a group whose slave was
// promoted has its master at the slave's address. Nil for the single
// broker.
func (in *Instance) Masters() []Broker { return in.brokerList() }

// Promoted reports whether master's slave was promoted in its place.
func (in *Instance) Promoted(master string) bool {
	_, s, err := in.group(master)
	return err == nil && s.promoted()
}

// Promote is the failover an operator makes by hand when the disk of a
// master of the HA form is lost: master is SIGKILLed if it runs and its
// store is deleted; its slave is SIGKILLed too (a paused one included)
// and started again as the group's master (brokerId 0, brokerRole
// ASYNC_MASTER) on its own port and store. The group then holds what the
// slave had received and nothing more: under asynchronous replication the
// messages the master had acknowledged but not yet sent to its slave (all
// of them while the slave was paused) are gone. Promote waits until the
// name server routes a message to the promoted slave. The group stays so,
// across stops and starts, until [Instance.Rebuild] or Wipe.
func (in *Instance) Promote(ctx context.Context, master string) error {
	m, s, err := in.group(master)
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
	if err := os.WriteFile(s.promotedFile(), []byte(promotedRole+"\n"), 0o644); err != nil {
		return err
	}
	in.logf("%s's store deleted (a lost disk); starting %s as the master of %s", m.name, s.name, master)
	return in.Start(ctx, s.name)
}

// Rebuild undoes [Instance.Promote]: it stops master's group, deletes both
// stores and starts the master and its slave afresh, in their own roles.
// Everything the group stored is gone; topics are created again by
// whoever needs them.
func (in *Instance) Rebuild(ctx context.Context, master string) error {
	m, s, err := in.group(master)
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
	if err := in.Wipe(m.name); err != nil {
		return err
	}
	if err := in.Wipe(s.name); err != nil {
		return err
	}
	in.logf("rebuilding %s: %s and %s from empty stores", master, m.name, s.name)
	if err := in.Start(ctx, m.name); err != nil {
		return err
	}
	return in.Start(ctx, s.name)
}

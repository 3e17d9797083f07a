package dashboard

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/fleet"
)

// fleetGroup is one (kind, group) of the fleet card: its instances and
// how many are in each state. Bad groups are listed first, open.
type fleetGroup struct {
	Kind, Name           string
	Live, Failing, Stale int
	Instances            []fleetInstance
}

// Bad reports whether an instance of the group is failing or stale.
func (g fleetGroup) Bad() bool { return g.Failing+g.Stale > 0 }

// fleetInstance is one instance of the fleet card.
type fleetInstance struct {
	ID     string
	State  string // fleet.StateLive, StateFailing or StateStale
	Silent time.Duration
	Err    string
	fleet.Counts
}

// fleetView reads the instance table and the relays of the outbox into
// the fleet card's groups: failing or stale ones first, then by kind and
// name.
func (d *Dashboard) fleetView(ctx context.Context, relays []outbox.RelayStatus) ([]fleetGroup, error) {
	rows, err := fleet.List(ctx, d.db, d.cfg.InstancesTable)
	if errors.Is(err, fleet.ErrNoTable) {
		err = nil // said by the card when no relay is listed either
	}
	byKey := map[[2]string]*fleetGroup{}
	var groups []*fleetGroup
	add := func(kind, name string, in fleetInstance) {
		g := byKey[[2]string{kind, name}]
		if g == nil {
			g = &fleetGroup{Kind: kind, Name: name}
			byKey[[2]string{kind, name}] = g
			groups = append(groups, g)
		}
		switch in.State {
		case fleet.StateFailing:
			g.Failing++
		case fleet.StateStale:
			g.Stale++
		default:
			g.Live++
		}
		g.Instances = append(g.Instances, in)
	}
	for _, r := range rows {
		add(r.Kind, r.Name, fleetInstance{ID: r.ID, State: r.State, Silent: r.Silent, Err: r.LastError, Counts: r.Counts})
	}
	for _, r := range relays {
		add("relay", d.ob.Table(), fleetInstance{ID: r.Name, State: string(r.State), Silent: r.Age, Err: r.LastError})
	}
	out := make([]fleetGroup, len(groups))
	for i, g := range groups {
		sort.SliceStable(g.Instances, func(a, b int) bool {
			return stateRank(g.Instances[a].State) > stateRank(g.Instances[b].State)
		})
		out[i] = *g
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Bad() != out[j].Bad() {
			return out[i].Bad()
		}
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out, err
}

// stateRank orders the instances of a group: failing, stale, live.
func stateRank(state string) int {
	switch state {
	case fleet.StateFailing:
		return 2
	case fleet.StateStale:
		return 1
	}
	return 0
}

package rmqadmin

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"

	"github.com/txmsg/txmsg/internal/rmqwire"
)

// Member is one broker of a broker group, as the name server routes it.
type Member struct {
	// ID is the broker's ID in the group: 0 for the master.
	ID   int64
	Addr string
	// MaxOffset is the end of its commit log in bytes
	// (commitLogMaxOffset of its runtime information); valid without Err.
	MaxOffset int64
	// Err says why the broker did not tell.
	Err string
}

// Group is one broker group (a broker name): its master and slaves.
type Group struct {
	Cluster string
	Name    string
	// Master is nil when the name server routes no master of the group.
	Master *Member
	// Slaves are the group's other brokers, by ID.
	Slaves []Member
}

// Groups asks the name servers (the first that answers deciding) for the
// cluster's broker groups and each broker for the end of its commit log,
// all brokers at once. Groups come sorted by cluster and name.
func (c *Client) Groups(ctx context.Context) ([]Group, error) {
	var info *rmqwire.ClusterInfo
	var lastErr error
	for _, ns := range c.NameServers {
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		info, lastErr = rmqwire.Cluster(rctx, ns, c.TLS)
		cancel()
		if lastErr == nil {
			break
		}
	}
	if info == nil {
		if lastErr == nil {
			lastErr = errors.New("no name server configured")
		}
		return nil, lastErr
	}
	cluster := map[string]string{}
	for name, names := range info.ClusterAddrTable {
		for _, n := range names {
			cluster[n] = name
		}
	}
	var groups []Group
	for name, bd := range info.BrokerAddrTable {
		g := Group{Cluster: cluster[name], Name: name}
		if g.Cluster == "" {
			g.Cluster = bd.Cluster
		}
		for id, addr := range bd.BrokerAddrs {
			n, err := strconv.ParseInt(id, 10, 64)
			if err != nil {
				continue
			}
			m := Member{ID: n, Addr: addr}
			if n == 0 {
				g.Master = &m
			} else {
				g.Slaves = append(g.Slaves, m)
			}
		}
		sort.Slice(g.Slaves, func(i, j int) bool { return g.Slaves[i].ID < g.Slaves[j].ID })
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].Cluster != groups[j].Cluster {
			return groups[i].Cluster < groups[j].Cluster
		}
		return groups[i].Name < groups[j].Name
	})
	var wg sync.WaitGroup
	for i := range groups {
		members := []*Member{groups[i].Master}
		for j := range groups[i].Slaves {
			members = append(members, &groups[i].Slaves[j])
		}
		for _, m := range members {
			if m == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.readMaxOffset(ctx, m)
			}()
		}
	}
	wg.Wait()
	return groups, nil
}

// readMaxOffset fills m.MaxOffset from the broker's runtime information,
// or m.Err.
func (c *Client) readMaxOffset(ctx context.Context, m *Member) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	rt, err := rmqwire.RuntimeInfo(ctx, m.Addr, c.TLS)
	if err != nil {
		m.Err = err.Error()
		return
	}
	if m.MaxOffset, err = rmqwire.CommitLogMaxOffset(rt); err != nil {
		m.Err = err.Error()
	}
}

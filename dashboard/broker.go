package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/txmsg/txmsg/dashboard/internal/rmqadmin"
)

// checkMaxTimeTopic is where the broker moves half messages whose check
// window ran out (txrmq.CheckMaxTimeTopic).
const checkMaxTimeTopic = "TRANS_CHECK_MAX_TIME_TOPIC"

type brokerData struct {
	NameServers []string
	Groups      []brokerGroup
	GroupsErr   string
	Topics      []topicLag
	CheckMax    checkMaxView
}

// replicaBehindWarn is how far, in commit-log bytes, a slave may be behind
// its master before the broker page shows it in amber. A slave that
// replicates keeps up within a few KB; one that is behind by more is
// catching up or stuck, and under asynchronous replication a failover
// now would lose what it lacks.
const replicaBehindWarn = 4 << 20

// brokerGroup is one broker group (broker name) as the broker page shows
// it: its master, its slaves with how far each is behind, and what is
// wrong, if anything.
type brokerGroup struct {
	Cluster, Name string
	Master        *rmqadmin.Member
	Slaves        []replica
	// Level is "ok", "warn" or "bad"; Problem says why when not ok.
	Level, Problem string
}

// replica is a slave of a broker group.
type replica struct {
	rmqadmin.Member
	// Behind is the master's commit-log end minus the slave's, in
	// bytes; -1 when either did not tell.
	Behind int64
}

// brokerGroups reads the cluster's broker groups and judges each: a
// group without a master, or whose master does not answer, is bad; a
// slave that does not answer or is more than replicaBehindWarn behind is
// amber, and so is a group without a slave when other groups have some
// (its slave died or left).
func brokerGroups(gs []rmqadmin.Group) []brokerGroup {
	anySlaves := false
	for _, g := range gs {
		anySlaves = anySlaves || len(g.Slaves) > 0
	}
	out := make([]brokerGroup, 0, len(gs))
	for _, g := range gs {
		v := brokerGroup{Cluster: g.Cluster, Name: g.Name, Master: g.Master, Level: "ok"}
		var problems []string
		bad := false
		switch {
		case g.Master == nil:
			bad = true
			problems = append(problems, "no master: the name server routes none, so nothing can be sent to this group (the master is down, or a failover is under way)")
		case g.Master.Err != "":
			bad = true
			problems = append(problems, "the master does not answer: "+g.Master.Err)
		}
		for _, sl := range g.Slaves {
			r := replica{Member: sl, Behind: -1}
			if g.Master != nil && g.Master.Err == "" && sl.Err == "" {
				r.Behind = max(g.Master.MaxOffset-sl.MaxOffset, 0)
			}
			switch {
			case sl.Err != "":
				problems = append(problems, fmt.Sprintf("slave %d (%s) does not answer: %s", sl.ID, sl.Addr, sl.Err))
			case r.Behind > replicaBehindWarn:
				problems = append(problems, fmt.Sprintf("slave %d (%s) is %s behind its master: a failover now loses what it lacks under asynchronous replication", sl.ID, sl.Addr, byteSize(r.Behind)))
			}
			v.Slaves = append(v.Slaves, r)
		}
		if len(g.Slaves) == 0 && anySlaves {
			problems = append(problems, "no slave: other groups have one; this group's died or left the name server, and it has no copy")
		}
		if len(problems) > 0 {
			v.Level, v.Problem = "warn", strings.Join(problems, "; ")
		}
		if bad {
			v.Level = "bad"
		}
		out = append(out, v)
	}
	return out
}

// byteSize writes n bytes in B, KiB, MiB or GiB.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

type topicLag struct {
	Topic    string
	Queues   int
	Messages int64 // max offset summed over queues
	Groups   []groupLag
	Err      string
}

// groupLag is one group's lag on a topic. Only a group with committed
// offsets can lag: one that never committed any (no consumer of it ever
// consumed the topic, or an observer that only looked) is shown as such,
// not in amber.
type groupLag struct {
	Group     string
	Lag       int64 // messages past the committed offsets; meaningful when Committed
	Committed bool  // the group has committed offsets on some queue of the topic
	Err       string
	// Clients is how many consumers of the group the brokers of the
	// topic have connected (the most any one broker reports); ClientsErr
	// says why a broker did not tell.
	Clients    int
	ClientsErr string
}

type checkMaxView struct {
	Exists bool
	Size   int64
	Err    string
}

func (d *Dashboard) broker(r *http.Request) (string, string, any, error) {
	if d.rmq == nil {
		return "", "", nil, notFound("The broker page needs name servers: start txmsgctl serve with -namesrv, or set Config.NameServers.")
	}
	ctx := r.Context()
	data := &brokerData{NameServers: d.cfg.NameServers}
	topics := map[string]bool{}
	for _, t := range d.cfg.Topics {
		topics[t] = true
	}
	// Topics txmsg's consumers handled messages of.
	var pairs []struct{ Topic string }
	in, _ := d.inbox.Tables()
	if err := d.db.WithContext(ctx).Table(in).Distinct("topic").Limit(50).Scan(&pairs).Error; err == nil {
		for _, p := range pairs {
			topics[p.Topic] = true
		}
	}
	var names []string
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)
	data.Topics = make([]topicLag, len(names))
	var wg sync.WaitGroup
	for i, t := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data.Topics[i] = d.topicLag(ctx, t)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		data.CheckMax = d.checkMax(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		gs, err := d.rmq.Groups(ctx)
		if err != nil {
			data.GroupsErr = err.Error()
			return
		}
		data.Groups = brokerGroups(gs)
	}()
	wg.Wait()
	return "broker", "Broker", data, nil
}

// topicLag measures each consumer group's lag on topic: the messages
// between its committed offset and the end of each queue.
func (d *Dashboard) topicLag(ctx context.Context, topic string) topicLag {
	tl := topicLag{Topic: topic}
	route, err := d.rmq.Route(ctx, topic)
	if err != nil {
		tl.Err = err.Error()
		return tl
	}
	tl.Queues = len(route.Queues)
	maxes := make([]int64, len(route.Queues))
	for i, q := range route.Queues {
		if maxes[i], err = d.rmq.MaxOffset(ctx, topic, q); err != nil {
			tl.Err = err.Error()
			return tl
		}
		tl.Messages += maxes[i]
	}
	groups := map[string]bool{}
	asked := map[string]bool{}
	var addrs []string
	for _, q := range route.Queues {
		if asked[q.Addr] {
			continue
		}
		asked[q.Addr] = true
		addrs = append(addrs, q.Addr)
		gs, err := d.rmq.ConsumedBy(ctx, q.Addr, topic)
		if err != nil {
			tl.Err = err.Error()
			return tl
		}
		for _, g := range gs {
			groups[g] = true
		}
	}
	for g := range groups {
		gl := groupLag{Group: g}
		for i, q := range route.Queues {
			off, err := d.rmq.ConsumerOffset(ctx, g, topic, q)
			if errors.Is(err, rmqadmin.ErrNotFound) {
				gl.Lag += maxes[i]
				continue
			}
			if err != nil {
				gl.Err = err.Error()
				break
			}
			gl.Committed = true
			gl.Lag += max(maxes[i]-off, 0)
		}
		for _, addr := range addrs {
			n, err := d.rmq.Connections(ctx, addr, g)
			if err != nil {
				gl.ClientsErr = err.Error()
				continue
			}
			gl.Clients = max(gl.Clients, n)
		}
		tl.Groups = append(tl.Groups, gl)
	}
	sort.Slice(tl.Groups, func(i, j int) bool { return tl.Groups[i].Group < tl.Groups[j].Group })
	return tl
}

// checkMax counts the half messages the broker discarded: those kept in
// TRANS_CHECK_MAX_TIME_TOPIC.
func (d *Dashboard) checkMax(ctx context.Context) checkMaxView {
	var v checkMaxView
	route, err := d.rmq.Route(ctx, checkMaxTimeTopic)
	if errors.Is(err, rmqadmin.ErrTopicNotExist) {
		return v
	}
	if err != nil {
		v.Err = err.Error()
		return v
	}
	v.Exists = true
	for _, q := range route.Queues {
		hi, err := d.rmq.MaxOffset(ctx, checkMaxTimeTopic, q)
		if err != nil {
			v.Err = err.Error()
			return v
		}
		lo, err := d.rmq.MinOffset(ctx, checkMaxTimeTopic, q)
		if err != nil {
			v.Err = err.Error()
			return v
		}
		v.Size += max(hi-lo, 0)
	}
	return v
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
	"github.com/txmsg/txmsg/internal/rmqwire"
	"github.com/txmsg/txmsg/txmsg"
)

// Topic command defaults.
const (
	defaultTopicQueues = 8
	maxTopicQueues     = 1024
	// nameServerWait bounds one name server's answer.
	nameServerWait = 3 * time.Second
)

// topicCmd is the parsed command line of topic create and topic check.
type topicCmd struct {
	nameServers []string
	topics      []string
	queues      int
	cluster     string
	brokers     []string
	tls         bool
	timeout     time.Duration
}

func newTopicFlags(e *env, name, synopsis string, args []string) (*topicCmd, error) {
	fs := flag.NewFlagSet("txmsgctl topic "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: txmsgctl topic %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	var ns, topics, brokers string
	c := &topicCmd{}
	fs.StringVar(&ns, "namesrv", "", "RocketMQ name servers, comma separated (default $TXMSG_NAMESRV)")
	fs.StringVar(&topics, "topic", "", "topics, comma separated, as the broker names them (with a namespace: NAMESPACE%topic)")
	queueHelp := "read and write queues per broker"
	if name == "check" {
		queueHelp = "when set, the queues each broker must have (read and write)"
	}
	def := defaultTopicQueues
	if name == "check" {
		def = 0
	}
	fs.IntVar(&c.queues, "queues", def, queueHelp)
	fs.StringVar(&c.cluster, "cluster", "", "the cluster whose brokers get the topics (default: the name server's only cluster)")
	fs.StringVar(&brokers, "broker", "", "broker master addresses, comma separated, instead of -cluster")
	fs.BoolVar(&c.tls, "tls", false, "TLS to the name servers and brokers")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
	pos, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageError("topic %s takes no arguments, got %q; name topics with -topic a,b", name, pos)
	}
	if ns == "" {
		ns = e.getenv("TXMSG_NAMESRV")
	}
	c.nameServers = splitList(ns)
	c.topics = splitList(topics)
	c.brokers = splitList(brokers)
	switch {
	case len(c.nameServers) == 0:
		return nil, usageError("no name server: pass -namesrv HOST:PORT or set TXMSG_NAMESRV")
	case len(c.topics) == 0:
		return nil, usageError("no topic: pass -topic NAME[,NAME...]")
	case c.cluster != "" && len(c.brokers) > 0:
		return nil, usageError("-cluster and -broker exclude each other: pick the brokers by cluster or by address")
	case c.queues < 0 || c.queues > maxTopicQueues || (name == "create" && c.queues == 0):
		return nil, usageError("-queues must be between 1 and %d", maxTopicQueues)
	case c.timeout <= 0:
		return nil, usageError("-timeout must be positive")
	}
	for _, t := range c.topics {
		if err := txmsg.ValidateTopic(t); err != nil {
			return nil, usageError("-topic %q: %v", t, err)
		}
	}
	return c, nil
}

// target is a broker a topic goes on: its name and master address.
type target struct{ name, addr string }

// ask runs fn against the first name server that answers, each within
// nameServerWait, and returns its address.
func (c *topicCmd) ask(ctx context.Context, fn func(ctx context.Context, addr string) error) (string, error) {
	var failed []string
	for _, addr := range c.nameServers {
		actx, cancel := context.WithTimeout(ctx, nameServerWait)
		err := fn(actx, addr)
		cancel()
		if err == nil || errors.Is(err, rmqwire.ErrTopicNotExist) {
			return addr, err
		}
		failed = append(failed, fmt.Sprintf("%s: %v", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return "", fmt.Errorf("%w: no name server answers (%s)", txmsg.ErrUnavailable, strings.Join(failed, "; "))
}

// targets returns the brokers of -broker or of the cluster, from the
// name server's table of brokers.
func (c *topicCmd) targets(ctx context.Context) (string, []target, error) {
	var ci *rmqwire.ClusterInfo
	ns, err := c.ask(ctx, func(ctx context.Context, addr string) (err error) {
		ci, err = rmqwire.Cluster(ctx, addr, c.tls)
		return err
	})
	if err != nil {
		return "", nil, err
	}
	byAddr := map[string]string{}
	for name, b := range ci.BrokerAddrTable {
		byAddr[b.Master()] = name
	}
	if len(c.brokers) > 0 {
		var ts []target
		for _, addr := range c.brokers {
			name := byAddr[addr]
			if name == "" {
				name = addr // not registered (yet): named by its address
			}
			ts = append(ts, target{name, addr})
		}
		return ns, ts, nil
	}
	clusters := make([]string, 0, len(ci.ClusterAddrTable))
	for name := range ci.ClusterAddrTable {
		clusters = append(clusters, name)
	}
	sort.Strings(clusters)
	cluster := c.cluster
	switch {
	case cluster == "" && len(clusters) == 1:
		cluster = clusters[0]
	case cluster == "" && len(clusters) == 0:
		return "", nil, fmt.Errorf("name server %s knows no broker: start the brokers, or name them with -broker", ns)
	case cluster == "":
		return "", nil, usageError("name server %s knows several clusters (%s): pick one with -cluster", ns, strings.Join(clusters, ", "))
	}
	names, ok := ci.ClusterAddrTable[cluster]
	if !ok {
		return "", nil, usageError("name server %s knows no cluster %q; it knows %s", ns, cluster, strings.Join(clusters, ", "))
	}
	sort.Strings(names)
	var ts []target
	for _, name := range names {
		addr := ci.BrokerAddrTable[name].Master()
		if addr == "" {
			return "", nil, fmt.Errorf("broker %s of cluster %s has no master registered on name server %s; name the brokers with -broker", name, cluster, ns)
		}
		ts = append(ts, target{name, addr})
	}
	return ns, ts, nil
}

// routes returns each topic's route from the first name server that
// answers; a topic it has none for is absent from the map.
func (c *topicCmd) routes(ctx context.Context) (string, map[string]*rmqwire.Route, error) {
	routes := map[string]*rmqwire.Route{}
	ns, err := c.ask(ctx, func(ctx context.Context, addr string) error {
		clear(routes)
		for _, t := range c.topics {
			r, err := rmqwire.TopicRoute(ctx, addr, c.tls, t)
			switch {
			case errors.Is(err, rmqwire.ErrTopicNotExist):
			case err != nil:
				return err
			default:
				routes[t] = r
			}
		}
		return nil
	})
	return ns, routes, err
}

// problems compares the routes with the brokers each topic must be on
// and, when queues > 0, their queue counts.
func (c *topicCmd) problems(routes map[string]*rmqwire.Route, ts []target, queues int) (missing []string, wrong []string) {
	for _, t := range c.topics {
		r, ok := routes[t]
		if !ok {
			missing = append(missing, t)
			continue
		}
		have := map[string]rmqwire.QueueData{}
		for _, q := range r.QueueDatas {
			have[q.BrokerName] = q
		}
		for _, b := range ts {
			q, ok := have[b.name]
			switch {
			case !ok:
				wrong = append(wrong, fmt.Sprintf("topic %s is not on broker %s (%s)", t, b.name, b.addr))
			case queues > 0 && (q.ReadQueueNums != queues || q.WriteQueueNums != queues):
				wrong = append(wrong, fmt.Sprintf("topic %s has %d read / %d write queues on broker %s, not %d", t, q.ReadQueueNums, q.WriteQueueNums, b.name, queues))
			}
		}
	}
	return missing, wrong
}

// printRoutes prints each topic's queues per broker.
func (c *topicCmd) printRoutes(e *env, routes map[string]*rmqwire.Route) {
	for _, t := range c.topics {
		r, ok := routes[t]
		if !ok {
			continue
		}
		qs := append([]rmqwire.QueueData(nil), r.QueueDatas...)
		sort.Slice(qs, func(i, j int) bool { return qs[i].BrokerName < qs[j].BrokerName })
		for _, q := range qs {
			fmt.Fprintf(e.stdout, "topic %s: broker %s, %d read / %d write queues, perm %d\n", t, q.BrokerName, q.ReadQueueNums, q.WriteQueueNums, q.Perm)
		}
	}
}

// quietClientLogs sends the RocketMQ client's warnings and errors to
// stderr and drops the rest (its process-wide logger; a logger installed
// earlier stays).
func quietClientLogs(e *env) {
	_ = rmqlog.Install(slog.New(slog.NewTextHandler(scrubWriter{e}, nil)), slog.LevelWarn)
}

// missingTopics is the error for topics that have no route: the same
// words as the txmsg components' (txmsg.ErrTopicNotFound).
func missingTopics(ns string, topics []string) error {
	what := fmt.Sprintf("topic %q does not exist", topics[0])
	if len(topics) > 1 {
		what = fmt.Sprintf("topics %q do not exist", topics)
	}
	return fmt.Errorf("%w: %s on name server %s; create it on every broker with: txmsgctl topic create -namesrv %s -topic %s",
		txmsg.ErrTopicNotFound, what, ns, ns, strings.Join(topics, ","))
}

func cmdTopicCreate(ctx context.Context, e *env, args []string) error {
	c, err := newTopicFlags(e, "create", "create -namesrv HOST:PORT -topic NAME[,NAME...] [-queues 8] [-cluster NAME | -broker ADDR[,ADDR...]]", args)
	if err != nil {
		return err
	}
	quietClientLogs(e)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ns, ts, err := c.targets(ctx)
	if err != nil {
		return err
	}
	opts := []admin.AdminOption{admin.WithResolver(primitive.NewPassthroughResolver(c.nameServers))}
	if c.tls {
		// The client's TLS option writes its process-wide default remoting
		// config, which every other client reads as it connects: set it
		// only when asked for, like the consumers and producers do.
		opts = append(opts, admin.WithTls(true))
	}
	adm, err := admin.NewAdmin(opts...)
	if err != nil {
		return fmt.Errorf("rocketmq admin client: %w", err)
	}
	defer func() { _ = adm.Close() }()
	for _, t := range c.topics {
		for _, b := range ts {
			err := adm.CreateTopic(ctx, admin.WithTopicCreate(t), admin.WithBrokerAddrCreate(b.addr),
				admin.WithReadQueueNums(c.queues), admin.WithWriteQueueNums(c.queues))
			if err != nil {
				return fmt.Errorf("create topic %s on broker %s (%s): %w", t, b.name, b.addr, err)
			}
		}
	}
	// The broker registers the topic with the name servers at once; wait
	// until they route it to every broker with its queues.
	for {
		_, routes, err := c.routes(ctx)
		if err == nil {
			missing, wrong := c.problems(routes, ts, c.queues)
			if len(missing) == 0 && len(wrong) == 0 {
				c.printRoutes(e, routes)
				return nil
			}
			err = fmt.Errorf("created, but name server %s does not route them yet: %s", ns, strings.Join(append(wrong, missing...), "; "))
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func cmdTopicCheck(ctx context.Context, e *env, args []string) error {
	c, err := newTopicFlags(e, "check", "check -namesrv HOST:PORT -topic NAME[,NAME...] [-queues N] [-cluster NAME | -broker ADDR[,ADDR...]]", args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_, ts, err := c.targets(ctx)
	if err != nil {
		return err
	}
	ns, routes, err := c.routes(ctx)
	if err != nil {
		return err
	}
	c.printRoutes(e, routes)
	missing, wrong := c.problems(routes, ts, c.queues)
	var errs []error
	if len(missing) > 0 {
		errs = append(errs, missingTopics(ns, missing))
	}
	if len(wrong) > 0 {
		errs = append(errs, fmt.Errorf("%s; fix with: txmsgctl topic create -namesrv %s -topic %s -queues N", strings.Join(wrong, "; "), ns, strings.Join(c.topics, ",")))
	}
	return errors.Join(errs...)
}

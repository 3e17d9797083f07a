package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/txmsg/txmsg/internal/rmqwire"
	"github.com/txmsg/txmsg/txmsg"
)

// nameServerAnswer is what the first name server that answered said.
type nameServerAnswer struct {
	// addr is the name server that answered.
	addr string
	// missing are the asked topics it has no route for.
	missing []string
}

// askNameServers asks the name servers, in turn, for the route of each of
// topics (the broker's names, with the namespace) or, without topics, for
// the cluster's brokers, and returns the answer of the first that
// answers. Each name server has NameServerTimeout to answer, and ctx
// bounds the whole.
//
// When none answers, the error wraps txmsg.ErrUnavailable and each
// address's error, and names them. When ctx ends first, it wraps ctx's
// error too.
//
// The client's own route query takes no context, waits 6 s per name
// server and topic, and reports a name server that does not answer as a
// topic that does not exist; Start asks here first.
func (c *Conn) askNameServers(ctx context.Context, topics []string) (*nameServerAnswer, error) {
	e := &nameServersError{errs: []error{txmsg.ErrUnavailable}}
	for _, ns := range c.NameServers {
		addr := nameServerAddr(ns)
		a, err := c.askNameServer(ctx, addr, topics)
		if err == nil {
			return a, nil
		}
		e.failed = append(e.failed, fmt.Sprintf("%s: %v", addr, err))
		e.errs = append(e.errs, err)
		if ctx.Err() != nil {
			e.errs = append(e.errs, ctx.Err())
			break
		}
	}
	return nil, e
}

// nameServersError says which name servers did not answer and why. It
// wraps txmsg.ErrUnavailable, each name server's error and, when the
// caller's context ended, its error.
type nameServersError struct {
	failed []string
	errs   []error
}

func (e *nameServersError) Error() string {
	return fmt.Sprintf("%v: no name server answers (%s)", txmsg.ErrUnavailable, strings.Join(e.failed, "; "))
}

func (e *nameServersError) Unwrap() []error { return e.errs }

// askNameServer is askNameServers for the name server at addr.
func (c *Conn) askNameServer(ctx context.Context, addr string, topics []string) (*nameServerAnswer, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.NameServerTimeout,
		fmt.Errorf("NameServerTimeout (%s) passed", c.NameServerTimeout))
	defer cancel()
	a := &nameServerAnswer{addr: addr}
	if len(topics) == 0 {
		if _, err := rmqwire.Cluster(ctx, addr, c.TLS); err != nil {
			return nil, err
		}
		return a, nil
	}
	for _, topic := range topics {
		_, err := rmqwire.TopicRoute(ctx, addr, c.TLS, topic)
		switch {
		case errors.Is(err, rmqwire.ErrTopicNotExist):
			a.missing = append(a.missing, topic)
		case err != nil:
			return nil, err
		}
	}
	return a, nil
}

// topicMasters asks the name servers, in turn, for topic's route (the
// broker's name of the topic) and returns the first answer's master
// address per broker name. Each name server has NameServerTimeout, and
// ctx bounds the whole.
func (c *Conn) topicMasters(ctx context.Context, topic string) (map[string]string, error) {
	var errs []error
	for _, ns := range c.NameServers {
		ctx, cancel := context.WithTimeout(ctx, c.NameServerTimeout)
		r, err := rmqwire.TopicRoute(ctx, nameServerAddr(ns), c.TLS, topic)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out := make(map[string]string, len(r.BrokerDatas))
		for _, b := range r.BrokerDatas {
			out[b.BrokerName] = b.Master()
		}
		return out, nil
	}
	return nil, errors.Join(errs...)
}

// nameServerAddr is a NameServers entry as host:port.
func nameServerAddr(ns string) string {
	return strings.TrimPrefix(strings.TrimPrefix(ns, "http://"), "https://")
}

// missingTopicsError reports topics (the broker's names) that the name
// server at addr has no route for. Consumers fail with it and producers
// log it, in the same words.
func missingTopicsError(addr string, topics []string) error {
	what := fmt.Sprintf("topic %q does not exist", topics[0])
	if len(topics) > 1 {
		what = fmt.Sprintf("topics %q do not exist", topics)
	}
	return fmt.Errorf("%w: %s on name server %s; create it on every broker with: txmsgctl topic create -namesrv %s -topic %s",
		txmsg.ErrTopicNotFound, what, addr, addr, strings.Join(topics, ","))
}

// askTopicRoutes asks the name servers about topics (a consumer's at
// Start, a component's in Health): an error when none answers, or when a
// topic has no route.
func askTopicRoutes(ctx context.Context, c *Conn, topics []string) error {
	a, err := c.askNameServers(ctx, topics)
	if err != nil {
		return err
	}
	if len(a.missing) > 0 {
		return missingTopicsError(a.addr, a.missing)
	}
	return nil
}

// explainRouteError replaces the client's "route info not found" error
// of a consumer's start, which it gives both for a topic that does not
// exist and for name servers that do not answer, with what the name
// servers say now. Other errors are returned as they are.
func explainRouteError(ctx context.Context, c *Conn, topics []string, err error) error {
	if err == nil || !strings.Contains(err.Error(), "route info not found") {
		return err
	}
	if aerr := askTopicRoutes(ctx, c, topics); aerr != nil {
		return aerr
	}
	return err
}

// askProducerNameServers asks the name servers about a producer's topics
// at Start. A producer starts without them: its sends fail with
// txmsg.ErrUnavailable until a name server answers. So when none answers
// it logs a warning and reports answered false; it returns an error only
// when ctx ended. Topics without a route are logged as a warning too.
func askProducerNameServers(ctx context.Context, c *Conn, topics []string, log *slog.Logger) (answered bool, err error) {
	brokerTopics := make([]string, len(topics))
	for i, t := range topics {
		brokerTopics[i] = c.brokerTopic(t)
	}
	a, err := c.askNameServers(ctx, brokerTopics)
	switch {
	case err == nil:
		if len(a.missing) > 0 {
			log.Warn("topics have no route yet; the broker creates them on the first send only where autoCreateTopicEnable is on, with its default queue count",
				"err", missingTopicsError(a.addr, a.missing))
		}
		return true, nil
	case ctx.Err() != nil:
		return false, err
	default:
		log.Warn("starting without the name servers; sends fail until one answers", "err", err)
		return false, nil
	}
}

package txrmq

import (
	"context"
	"fmt"
	"net"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
	"github.com/txmsg/txmsg/txmsg"
)

// probeRoutes checks that the name servers route every topic and that the
// brokers serving them accept TCP connections. topics are the names the
// broker knows (with the namespace).
func probeRoutes(ctx context.Context, rp clientinternals.RouteProber, topics []string) error {
	var d net.Dialer
	for _, topic := range topics {
		mqs, err := fetchRoute(ctx, rp, topic)
		if err != nil {
			return fmt.Errorf("route of topic %q: %w", topic, err)
		}
		if len(mqs) == 0 {
			return fmt.Errorf("route of topic %q: no readable queues", topic)
		}
		dialed := map[string]bool{}
		for _, mq := range mqs {
			addr := rp.FindBrokerAddrByName(mq.BrokerName)
			if addr == "" || dialed[addr] {
				continue // not learnt yet: the route query above reached the cluster
			}
			dialed[addr] = true
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return fmt.Errorf("broker %s (%s) of topic %q: %w", mq.BrokerName, addr, topic, err)
			}
			_ = conn.Close()
		}
	}
	return nil
}

// fetchRoute queries one topic's route. The client's call takes no
// context; when ctx ends first, its answer is dropped.
func fetchRoute(ctx context.Context, rp clientinternals.RouteProber, topic string) ([]*primitive.MessageQueue, error) {
	type result struct {
		mqs []*primitive.MessageQueue
		err error
	}
	done := make(chan result, 1)
	go func() {
		mqs, err := rp.FetchSubscribeMessageQueues(topic)
		done <- result{mqs, err}
	}()
	select {
	case r := <-done:
		return r.mqs, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pingDB checks that db answers.
func pingDB(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// brokerTopic is topic's name on the broker, with the namespace.
func (c *Conn) brokerTopic(topic string) string {
	if c.Namespace != "" {
		return c.Namespace + "%" + topic
	}
	return topic
}

// Health reports whether the producer can do its work now: it is started
// and not closed, its database answers, and the name servers route every
// topic of TransactionalConfig.Topics to a broker that accepts
// connections. It returns nil when healthy; the error names the failing
// part. It is meant for readiness probes: it makes one name-server query
// per topic and one connection per broker, bounded by ctx.
func (t *Transactional) Health(ctx context.Context) error {
	t.mu.RLock()
	started, closed := t.started, t.closed
	t.mu.RUnlock()
	if err := lifecycle("transactional producer", t.cfg.Group, started, closed); err != nil {
		return err
	}
	if err := pingDB(ctx, t.db); err != nil {
		return fmt.Errorf("rocketmq: transactional producer of group %q: database: %w", t.cfg.Group, err)
	}
	if len(t.cfg.Topics) == 0 {
		return nil
	}
	rp, err := clientinternals.TransactionProducerNameServers(t.prod)
	if err != nil {
		return fmt.Errorf("rocketmq: transactional producer of group %q: %w", t.cfg.Group, err)
	}
	topics := make([]string, len(t.cfg.Topics))
	for i, topic := range t.cfg.Topics {
		topics[i] = t.cfg.brokerTopic(topic)
	}
	if err := askTopicRoutes(ctx, &t.cfg.Conn, topics); err != nil {
		return fmt.Errorf("rocketmq: transactional producer of group %q: %w", t.cfg.Group, err)
	}
	if err := probeRoutes(ctx, rp, topics); err != nil {
		return fmt.Errorf("rocketmq: transactional producer of group %q: %w", t.cfg.Group, err)
	}
	return nil
}

// lifecycle is the first check of a component's Health: ErrClosed after
// Close, ErrNotStarted before Start, naming the component and its group.
func lifecycle(what, group string, started, closed bool) error {
	switch {
	case closed:
		return fmt.Errorf("rocketmq: %s of group %q: %w", what, group, txmsg.ErrClosed)
	case !started:
		return fmt.Errorf("rocketmq: %s of group %q: %w", what, group, txmsg.ErrNotStarted)
	}
	return nil
}

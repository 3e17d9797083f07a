// Package rmqadmin speaks the few read-only requests of RocketMQ's
// remoting protocol that the dashboard needs and rocketmq-client-go does
// not expose: topic routes, queue offsets, a group's committed offsets,
// the groups consuming a topic, a group's connected consumers, messages
// by key, and messages by queue offset (pulls that commit nothing, as the
// broker's own TOOLS_CONSUMER group). Each request is one
// [rmqwire.Invoke]: a connection of its own, one JSON-encoded command,
// one answer; nothing is cached and nothing is written to the broker.
package rmqadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/internal/rmqwire"
)

// Request codes (RocketMQ's RequestCode).
const (
	codeQueryConsumerOffset = 14
	codeGetMaxOffset        = 30
	codeGetMinOffset        = 31
	codeGetConsumerConns    = 203 // GET_CONSUMER_CONNECTION_LIST
	codeQueryConsumeByWho   = 300
)

// Response codes (RocketMQ's ResponseCode).
const (
	resSuccess           = 0
	resQueryNotFound     = 22
	resConsumerNotOnline = 206
)

// ErrTopicNotExist means the name servers route no such topic.
var ErrTopicNotExist = rmqwire.ErrTopicNotExist

// ErrNotFound means the broker has no answer for the query (no committed
// offset, no message with the key).
var ErrNotFound = errors.New("rocketmq: not found")

// Client asks one cluster's name servers and brokers.
type Client struct {
	NameServers []string
	// TLS turns on TLS to the name servers and brokers.
	TLS bool
	// Timeout bounds each request; default 5 s.
	Timeout time.Duration
}

// invoke sends one request to addr within the client's timeout.
func (c *Client) invoke(ctx context.Context, addr string, code int, ext map[string]string) (*rmqwire.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	return rmqwire.Invoke(ctx, addr, c.TLS, code, ext)
}

// Queue is one message queue of a topic on a broker.
type Queue struct {
	Broker string // broker name
	Addr   string // master address
	ID     int
}

// Route is a topic's queues, by broker.
type Route struct {
	Topic  string
	Queues []Queue
}

// Route asks the name servers for topic's route, the first that answers
// deciding.
func (c *Client) Route(ctx context.Context, topic string) (*Route, error) {
	var lastErr error
	for _, ns := range c.NameServers {
		rctx, cancel := context.WithTimeout(ctx, c.timeout())
		rd, err := rmqwire.TopicRoute(rctx, ns, c.TLS, topic)
		cancel()
		if errors.Is(err, rmqwire.ErrTopicNotExist) {
			return nil, err
		}
		if err != nil {
			lastErr = err
			continue
		}
		masters := map[string]string{}
		for _, bd := range rd.BrokerDatas {
			masters[bd.BrokerName] = bd.Master()
		}
		r := &Route{Topic: topic}
		for _, qd := range rd.QueueDatas {
			addr := masters[qd.BrokerName]
			if addr == "" {
				continue
			}
			for i := 0; i < qd.ReadQueueNums; i++ {
				r.Queues = append(r.Queues, Queue{Broker: qd.BrokerName, Addr: addr, ID: i})
			}
		}
		sort.Slice(r.Queues, func(i, j int) bool {
			if r.Queues[i].Broker != r.Queues[j].Broker {
				return r.Queues[i].Broker < r.Queues[j].Broker
			}
			return r.Queues[i].ID < r.Queues[j].ID
		})
		return r, nil
	}
	if lastErr == nil {
		lastErr = errors.New("no name server configured")
	}
	return nil, lastErr
}

// offset sends an offset query and returns the "offset" field of the
// answer.
func (c *Client) offset(ctx context.Context, addr string, code int, ext map[string]string) (int64, error) {
	res, err := c.invoke(ctx, addr, code, ext)
	if err != nil {
		return 0, err
	}
	switch res.Code {
	case resSuccess:
	case resQueryNotFound:
		return 0, ErrNotFound
	default:
		return 0, fmt.Errorf("code %d: %s", res.Code, res.Remark)
	}
	n, err := strconv.ParseInt(res.Ext["offset"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad offset %q", res.Ext["offset"])
	}
	return n, nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 5 * time.Second
	}
	return c.Timeout
}

func queueExt(topic string, q Queue) map[string]string {
	return map[string]string{"topic": topic, "queueId": strconv.Itoa(q.ID), "bname": q.Broker}
}

// MaxOffset is the offset after the queue's last message.
func (c *Client) MaxOffset(ctx context.Context, topic string, q Queue) (int64, error) {
	return c.offset(ctx, q.Addr, codeGetMaxOffset, queueExt(topic, q))
}

// MinOffset is the offset of the queue's oldest kept message.
func (c *Client) MinOffset(ctx context.Context, topic string, q Queue) (int64, error) {
	return c.offset(ctx, q.Addr, codeGetMinOffset, queueExt(topic, q))
}

// ConsumerOffset is group's committed offset on the queue; ErrNotFound
// when the group has committed none.
func (c *Client) ConsumerOffset(ctx context.Context, group, topic string, q Queue) (int64, error) {
	ext := queueExt(topic, q)
	ext["consumerGroup"] = group
	return c.offset(ctx, q.Addr, codeQueryConsumerOffset, ext)
}

// ConsumedBy returns the consumer groups the broker at addr knows to
// consume topic: online ones and those with committed offsets.
func (c *Client) ConsumedBy(ctx context.Context, addr, topic string) ([]string, error) {
	res, err := c.invoke(ctx, addr, codeQueryConsumeByWho, map[string]string{"topic": topic})
	if err != nil {
		return nil, err
	}
	if res.Code != resSuccess {
		return nil, fmt.Errorf("groups of %s: code %d: %s", topic, res.Code, res.Remark)
	}
	var out struct {
		GroupList []string `json:"groupList"`
	}
	if err := json.Unmarshal(res.Body, &out); err != nil {
		return nil, fmt.Errorf("groups of %s: %w", topic, err)
	}
	sort.Strings(out.GroupList)
	return out.GroupList, nil
}

// Connections returns how many consumer clients of group are connected
// to the broker at addr (its heartbeats): zero when the broker knows no
// online consumer of the group.
func (c *Client) Connections(ctx context.Context, addr, group string) (int, error) {
	res, err := c.invoke(ctx, addr, codeGetConsumerConns, map[string]string{"consumerGroup": group})
	if err != nil {
		return 0, err
	}
	switch res.Code {
	case resSuccess:
	case resConsumerNotOnline:
		return 0, nil
	default:
		return 0, fmt.Errorf("connections of %s: code %d: %s", group, res.Code, res.Remark)
	}
	var out struct {
		ConnectionSet []json.RawMessage `json:"connectionSet"`
	}
	if err := json.Unmarshal(res.Body, &out); err != nil {
		return 0, fmt.Errorf("connections of %s: %w", group, err)
	}
	return len(out.ConnectionSet), nil
}

// QueryByKey returns up to max messages of topic stored under key on the
// broker at addr (the message keys index), stored in [from, to].
func (c *Client) QueryByKey(ctx context.Context, addr, topic, key string, max int, from, to time.Time) ([]*primitive.MessageExt, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	body, ok, err := rmqwire.QueryByKey(ctx, addr, c.TLS, topic, key, max, from, to)
	if err != nil || !ok {
		return nil, err
	}
	return primitive.DecodeMessage(body), nil
}

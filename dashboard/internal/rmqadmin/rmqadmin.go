// Package rmqadmin speaks the few read-only requests of RocketMQ's
// remoting protocol that the dashboard needs and rocketmq-client-go does
// not expose: topic routes, queue offsets, a group's committed offsets,
// the groups consuming a topic, and messages by key. Each request opens a
// connection of its own, sends one JSON-encoded command and reads one
// answer; nothing is cached and nothing is written to the broker.
package rmqadmin

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// Request codes (RocketMQ's RequestCode).
const (
	codeQueryMessage        = 12
	codeQueryConsumerOffset = 14
	codeGetMaxOffset        = 30
	codeGetMinOffset        = 31
	codeGetRouteInfo        = 105
	codeQueryConsumeByWho   = 300
)

// Response codes (RocketMQ's ResponseCode).
const (
	resSuccess       = 0
	resTopicNotExist = 17
	resQueryNotFound = 22
)

// ErrTopicNotExist means the name servers route no such topic.
var ErrTopicNotExist = errors.New("rocketmq: topic does not exist")

// ErrNotFound means the broker has no answer for the query (no committed
// offset, no message with the key).
var ErrNotFound = errors.New("rocketmq: not found")

// maxFrame bounds an answer's size.
const maxFrame = 64 << 20

var opaque atomic.Int32

type command struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int               `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields"`
}

// Client asks one cluster's name servers and brokers.
type Client struct {
	NameServers []string
	// Timeout bounds each request; default 5 s.
	Timeout time.Duration
}

// invoke sends one request to addr and returns the answer's header and
// body.
func (c *Client) invoke(ctx context.Context, addr string, code int, ext map[string]string) (*command, []byte, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req := command{Code: code, Language: "GO", Version: 317, Opaque: opaque.Add(1), ExtFields: ext}
	header, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	frame := make([]byte, 8+len(header))
	binary.BigEndian.PutUint32(frame[0:4], uint32(4+len(header)))
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(header))) // serialization type 0: JSON
	copy(frame[8:], header)
	if _, err := conn.Write(frame); err != nil {
		return nil, nil, fmt.Errorf("send to %s: %w", addr, err)
	}
	var lens [8]byte
	if _, err := io.ReadFull(conn, lens[:]); err != nil {
		return nil, nil, fmt.Errorf("read from %s: %w", addr, err)
	}
	total := binary.BigEndian.Uint32(lens[0:4])
	mark := binary.BigEndian.Uint32(lens[4:8])
	hlen := mark & 0xFFFFFF
	if mark>>24 != 0 {
		return nil, nil, fmt.Errorf("answer from %s is not JSON-encoded", addr)
	}
	if total > maxFrame || hlen+4 > total {
		return nil, nil, fmt.Errorf("answer from %s has a bad frame (%d bytes, header %d)", addr, total, hlen)
	}
	rest := make([]byte, total-4)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return nil, nil, fmt.Errorf("read from %s: %w", addr, err)
	}
	var res command
	if err := json.Unmarshal(rest[:hlen], &res); err != nil {
		return nil, nil, fmt.Errorf("answer from %s: %w", addr, err)
	}
	return &res, rest[hlen:], nil
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

type routeData struct {
	BrokerDatas []struct {
		BrokerName  string            `json:"brokerName"`
		BrokerAddrs map[string]string `json:"brokerAddrs"`
	} `json:"brokerDatas"`
	QueueDatas []struct {
		BrokerName     string `json:"brokerName"`
		ReadQueueNums  int    `json:"readQueueNums"`
		WriteQueueNums int    `json:"writeQueueNums"`
	} `json:"queueDatas"`
}

// numericKey finds the unquoted integer map keys of fastjson's output
// ({0:"host:port"}), which encoding/json rejects.
var numericKey = regexp.MustCompile(`([{,])(-?\d+):`)

// Route asks the name servers for topic's route.
func (c *Client) Route(ctx context.Context, topic string) (*Route, error) {
	var lastErr error
	for _, ns := range c.NameServers {
		res, body, err := c.invoke(ctx, ns, codeGetRouteInfo, map[string]string{"topic": topic, "acceptStandardJsonOnly": "true"})
		if err != nil {
			lastErr = err
			continue
		}
		switch res.Code {
		case resSuccess:
		case resTopicNotExist:
			return nil, fmt.Errorf("%w: %s", ErrTopicNotExist, topic)
		default:
			return nil, fmt.Errorf("route of %s: code %d: %s", topic, res.Code, res.Remark)
		}
		var rd routeData
		if err := json.Unmarshal(numericKey.ReplaceAll(body, []byte(`$1"$2":`)), &rd); err != nil {
			return nil, fmt.Errorf("route of %s: %w", topic, err)
		}
		masters := map[string]string{}
		for _, bd := range rd.BrokerDatas {
			masters[bd.BrokerName] = bd.BrokerAddrs["0"]
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
	res, _, err := c.invoke(ctx, addr, code, ext)
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
	n, err := strconv.ParseInt(res.ExtFields["offset"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad offset %q", res.ExtFields["offset"])
	}
	return n, nil
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
	res, body, err := c.invoke(ctx, addr, codeQueryConsumeByWho, map[string]string{"topic": topic})
	if err != nil {
		return nil, err
	}
	if res.Code != resSuccess {
		return nil, fmt.Errorf("groups of %s: code %d: %s", topic, res.Code, res.Remark)
	}
	var out struct {
		GroupList []string `json:"groupList"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("groups of %s: %w", topic, err)
	}
	sort.Strings(out.GroupList)
	return out.GroupList, nil
}

// QueryByKey returns up to max messages of topic stored under key on the
// broker at addr (the message keys index), stored in [from, to].
func (c *Client) QueryByKey(ctx context.Context, addr, topic, key string, max int, from, to time.Time) ([]*primitive.MessageExt, error) {
	ext := map[string]string{
		"topic":             topic,
		"key":               key,
		"maxNum":            strconv.Itoa(max),
		"beginTimestamp":    strconv.FormatInt(from.UnixMilli(), 10),
		"endTimestamp":      strconv.FormatInt(to.UnixMilli(), 10),
		"_UNIQUE_KEY_QUERY": "false",
	}
	res, body, err := c.invoke(ctx, addr, codeQueryMessage, ext)
	if err != nil {
		return nil, err
	}
	switch res.Code {
	case resSuccess:
	case resQueryNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("query %s by key: code %d: %s", topic, res.Code, res.Remark)
	}
	return primitive.DecodeMessage(body), nil
}

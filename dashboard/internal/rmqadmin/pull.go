package rmqadmin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// Pull request and answer codes (RocketMQ's RequestCode.PULL_MESSAGE and
// ResponseCode.PULL_*).
const (
	codePullMessage   = 11
	resPullNotFound   = 19
	resPullRetryNow   = 20
	resPullOffsetMove = 21
)

// pullFlagSubscription is PullSysFlag's FLAG_SUBSCRIPTION: the request
// carries its own subscription ("*"), so the broker needs no consumer of
// the reading group online. No commit or suspend flag: the pull commits
// no offset and answers at once.
const pullFlagSubscription = 1 << 2

// ReaderGroup is the consumer group the dashboard reads messages as. The
// broker creates it at its start (MixAll.TOOLS_CONSUMER_GROUP, the group
// mqadmin's message queries use), so reading creates no group, and no
// application group's subscriptions or offsets are touched.
const ReaderGroup = "TOOLS_CONSUMER"

// maxPullBatch is the most messages one pull asks for; the broker may
// answer fewer (32 from memory by default).
const maxPullBatch = 32

// StoredMessage is a message read from a queue, with where it is.
type StoredMessage struct {
	*primitive.MessageExt
	Broker  string // broker name
	QueueID int
	// Consumed says the group Newest was asked about has committed an
	// offset past the message: it was delivered (and handled, failed
	// again, or parked).
	Consumed bool
}

// Pull reads up to max messages of the queue from offset on, without
// committing an offset. It returns them and the offset to read next; a
// queue with nothing at offset returns none and offset itself.
func (c *Client) Pull(ctx context.Context, topic string, q Queue, offset int64, max int) ([]*primitive.MessageExt, int64, error) {
	if max > maxPullBatch {
		max = maxPullBatch
	}
	ext := queueExt(topic, q)
	ext["consumerGroup"] = ReaderGroup
	ext["queueOffset"] = strconv.FormatInt(offset, 10)
	ext["maxMsgNums"] = strconv.Itoa(max)
	ext["sysFlag"] = strconv.Itoa(pullFlagSubscription)
	ext["commitOffset"] = "0"
	ext["suspendTimeoutMillis"] = "0"
	ext["subscription"] = "*"
	ext["subVersion"] = "0"
	ext["expressionType"] = "TAG"
	res, err := c.invoke(ctx, q.Addr, codePullMessage, ext)
	if err != nil {
		return nil, offset, err
	}
	next := offset
	if n, err := strconv.ParseInt(res.Ext["nextBeginOffset"], 10, 64); err == nil {
		next = n
	}
	switch res.Code {
	case resSuccess:
		return primitive.DecodeMessage(res.Body), next, nil
	case resPullNotFound, resPullRetryNow, resPullOffsetMove:
		return nil, next, nil
	default:
		return nil, offset, fmt.Errorf("pull %s queue %d on %s: code %d: %s", topic, q.ID, q.Broker, res.Code, res.Remark)
	}
}

// Newest returns the newest messages of topic, up to perQueue from each of
// its queues, newest first by store time; with a group, each says whether
// that group's committed offset is past it. A topic the name servers do
// not route returns none: a group's %RETRY% and %DLQ% topics exist only
// once the broker needed them.
func (c *Client) Newest(ctx context.Context, topic string, perQueue int, group string) ([]StoredMessage, error) {
	rt, err := c.Route(ctx, topic)
	if errors.Is(err, ErrTopicNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []StoredMessage
	for _, q := range rt.Queues {
		msgs, err := c.newestOfQueue(ctx, topic, q, perQueue)
		if err != nil {
			return out, err
		}
		committed := int64(-1)
		if group != "" && len(msgs) > 0 {
			committed, err = c.ConsumerOffset(ctx, group, topic, q)
			if errors.Is(err, ErrNotFound) {
				committed = -1
			} else if err != nil {
				return out, err
			}
		}
		for _, m := range msgs {
			out = append(out, StoredMessage{MessageExt: m, Broker: q.Broker, QueueID: q.ID, Consumed: m.QueueOffset < committed})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StoreTimestamp > out[j].StoreTimestamp })
	return out, nil
}

func (c *Client) newestOfQueue(ctx context.Context, topic string, q Queue, n int) ([]*primitive.MessageExt, error) {
	maxOff, err := c.MaxOffset(ctx, topic, q)
	if err != nil {
		return nil, err
	}
	minOff, err := c.MinOffset(ctx, topic, q)
	if err != nil {
		return nil, err
	}
	from := max(minOff, maxOff-int64(n))
	var out []*primitive.MessageExt
	for off := from; off < maxOff && len(out) < n; {
		msgs, next, err := c.Pull(ctx, topic, q, off, n-len(out))
		if err != nil {
			return out, err
		}
		out = append(out, msgs...)
		if next <= off {
			break
		}
		off = next
	}
	return out, nil
}

// At reads the one message of topic stored at offset of the queue with
// id queueID on broker brokerName; ErrNotFound when it is gone.
func (c *Client) At(ctx context.Context, topic, brokerName string, queueID int, offset int64) (*primitive.MessageExt, error) {
	rt, err := c.Route(ctx, topic)
	if errors.Is(err, ErrTopicNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	for _, q := range rt.Queues {
		if q.Broker != brokerName || q.ID != queueID {
			continue
		}
		msgs, _, err := c.Pull(ctx, topic, q, offset, 1)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.QueueOffset == offset {
				return m, nil
			}
		}
		return nil, ErrNotFound
	}
	return nil, ErrNotFound
}

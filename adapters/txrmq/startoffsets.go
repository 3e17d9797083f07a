package txrmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
)

// Remoting request and response codes of the broker's offset calls.
const (
	reqQueryConsumerOffset  = 14
	reqUpdateConsumerOffset = 15
	reqGetMaxOffset         = 30

	resSuccess             = 0
	resTopicNotExist       = 17
	resQueryNotFound       = 22
	resSubscriptionMissing = 26
)

// offsetCallTimeout bounds one offset request to a broker.
const offsetCallTimeout = 3 * time.Second

// errCannotPin says the pinned client's internals that start-offset
// pinning needs are not there; the consumer then runs as the client alone
// would.
var errCannotPin = errors.New("cannot reach the client's offsets")

// startPinner records a new group's start offsets on the broker: see
// pinStartOffsets.
type startPinner struct {
	c      any // the client's push or pull consumer, started
	group  string
	topics map[string]bool // subscribed topics, as the broker names them
	req    clientinternals.Requester
	routes clientinternals.RouteProber
	log    *slog.Logger
}

// pinStartOffsets makes the start offset of every queue the consumer c
// holds, and for which the group has no committed offset on the broker,
// durable: it writes it to the broker, checks that the broker has it, and
// sets the client's in-memory offset to it, before Start returns. It
// returns how many queues it pinned.
//
// Why: for a queue its group has no offset for, the client starts at the
// offset the broker suggests (0 while the queue's first message is in the
// page cache) or else at the queue's end, and keeps that start only in
// memory until it has consumed something there and persisted it: the
// first persist comes 10 s after the client starts, then every 5 s. A
// process that dies before that leaves the group without an offset, and
// the next start asks again: the queue's end has moved, and every event
// published while it was down is skipped, without an error.
//
// The start offset it records is the client's own when the client holds
// one (the broker's 0, or how far it has consumed), else the queue's end
// read now, which is at or after where the client's pull began: messages
// in between were published during Start, before the group's recorded
// start, and may or may not be handled.
func pinStartOffsets(ctx context.Context, c any, group string, topics []string, log *slog.Logger) (int, error) {
	p := &startPinner{c: c, group: group, topics: map[string]bool{}, log: log}
	for _, t := range topics {
		p.topics[t] = true
	}
	var err error
	if p.req, err = clientinternals.ConsumerRequester(c); err != nil {
		return 0, fmt.Errorf("%w: %w", errCannotPin, err)
	}
	if p.routes, err = clientinternals.NameServers(c); err != nil {
		return 0, fmt.Errorf("%w: %w", errCannotPin, err)
	}
	held, err := clientinternals.HeldQueues(c)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errCannotPin, err)
	}
	n := 0
	for _, mq := range held {
		if !p.topics[mq.Topic] {
			continue // the group's retry topic: the client starts it at 0
		}
		pinned, err := p.pin(ctx, mq)
		if err != nil {
			return n, err
		}
		if pinned {
			n++
		}
	}
	return n, nil
}

// pin records mq's start offset unless the group has one on the broker.
func (p *startPinner) pin(ctx context.Context, mq primitive.MessageQueue) (bool, error) {
	addr := p.routes.FindBrokerAddrByName(mq.BrokerName)
	if addr == "" {
		return false, fmt.Errorf("queue %s: no address for broker %s", queueName(mq), mq.BrokerName)
	}
	committed, found, err := p.committed(ctx, addr, mq)
	if err != nil || (found && committed > 0) {
		return false, err
	}
	start, ok, err := clientinternals.ConsumedOffset(p.c, mq)
	if err != nil {
		return false, fmt.Errorf("%w: %w", errCannotPin, err)
	}
	switch {
	case found && (!ok || start < 0):
		return false, nil
	case found:
		// A committed 0, or a broker before 5.0 that ignores
		// setZeroIfNotFound and answers 0 for a group without an offset
		// while the queue's first message is in memory. The client
		// started there: committing where it is costs nothing either way.
	case !ok || start < 0:
		end, err := p.maxOffset(ctx, addr, mq)
		if err != nil {
			return false, err
		}
		// From now on the client's own persists send this or more, never
		// the -1 that stands for "none".
		if start, err = clientinternals.RaiseConsumedOffset(p.c, mq, end); err != nil {
			return false, fmt.Errorf("%w: %w", errCannotPin, err)
		}
	}
	// A persist of the client that read its table before the raise may
	// reach the broker after the commit below; read the offset back.
	for attempt := 1; ; attempt++ {
		if err := p.commit(ctx, addr, mq, start); err != nil {
			return false, err
		}
		got, found, err := p.committed(ctx, addr, mq)
		if err != nil {
			return false, err
		}
		if found {
			p.log.Debug("recorded the group's start offset of a queue",
				"topic", mq.Topic, "broker", mq.BrokerName, "queue_id", mq.QueueId, "offset", start, "broker_offset", got)
			return true, nil
		}
		if attempt == 3 {
			return false, fmt.Errorf("queue %s: the broker does not keep the committed start offset %d", queueName(mq), start)
		}
	}
}

// committed asks the broker for the group's committed offset of mq,
// without the broker's "0 while the first message is in memory" answer.
func (p *startPinner) committed(ctx context.Context, addr string, mq primitive.MessageQueue) (int64, bool, error) {
	resp, err := p.call(ctx, addr, reqQueryConsumerOffset, mq, map[string]string{
		"consumerGroup":     p.group,
		"setZeroIfNotFound": "false",
	})
	if err != nil {
		return 0, false, fmt.Errorf("queue %s: query the group's offset: %w", queueName(mq), err)
	}
	switch resp.Code {
	case resSuccess:
		off, err := offsetField(resp)
		if err != nil {
			return 0, false, fmt.Errorf("queue %s: query the group's offset: %w", queueName(mq), err)
		}
		return off, off >= 0, nil
	case resQueryNotFound:
		return 0, false, nil
	default:
		return 0, false, fmt.Errorf("queue %s: query the group's offset: %w", queueName(mq), brokerError(resp, p.group))
	}
}

func (p *startPinner) maxOffset(ctx context.Context, addr string, mq primitive.MessageQueue) (int64, error) {
	resp, err := p.call(ctx, addr, reqGetMaxOffset, mq, nil)
	if err == nil && resp.Code != resSuccess {
		err = brokerError(resp, p.group)
	}
	var off int64
	if err == nil {
		off, err = offsetField(resp)
	}
	if err != nil {
		return 0, fmt.Errorf("queue %s: query its end offset: %w", queueName(mq), err)
	}
	return off, nil
}

func (p *startPinner) commit(ctx context.Context, addr string, mq primitive.MessageQueue, offset int64) error {
	resp, err := p.call(ctx, addr, reqUpdateConsumerOffset, mq, map[string]string{
		"consumerGroup": p.group,
		"commitOffset":  strconv.FormatInt(offset, 10),
	})
	if err == nil && resp.Code != resSuccess {
		err = brokerError(resp, p.group)
	}
	if err != nil {
		return fmt.Errorf("queue %s: commit the start offset %d: %w", queueName(mq), offset, err)
	}
	return nil
}

// call sends one request about mq; fields add to the queue's own.
func (p *startPinner) call(ctx context.Context, addr string, code int16, mq primitive.MessageQueue, fields map[string]string) (clientinternals.Response, error) {
	f := map[string]string{
		"topic":   mq.Topic,
		"queueId": strconv.Itoa(mq.QueueId),
		"bname":   mq.BrokerName,
	}
	for k, v := range fields {
		f[k] = v
	}
	return p.req(ctx, addr, code, f, offsetCallTimeout)
}

func offsetField(resp clientinternals.Response) (int64, error) {
	s, ok := resp.Fields["offset"]
	if !ok {
		return 0, errors.New("the broker's answer has no offset")
	}
	off, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the broker's answer has offset %q: %w", s, err)
	}
	return off, nil
}

// brokerError describes a broker's refusal.
func brokerError(resp clientinternals.Response, group string) error {
	remark := strings.TrimSpace(resp.Remark)
	switch resp.Code {
	case resSubscriptionMissing:
		return fmt.Errorf("the broker has no subscription group %q (code %d: %s); create it (mqadmin updateSubGroup) or let the broker create groups (autoCreateSubscriptionGroup=true)", group, resp.Code, remark)
	case resTopicNotExist:
		return fmt.Errorf("the broker does not have the topic (code %d: %s)", resp.Code, remark)
	default:
		return fmt.Errorf("broker answered code %d: %s", resp.Code, remark)
	}
}

func queueName(mq primitive.MessageQueue) string {
	return fmt.Sprintf("%s@%s#%d", mq.Topic, mq.BrokerName, mq.QueueId)
}

package rmqproc

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// ReadyTopic is the topic readiness probes send to: created on the fly by
// a broker with autoCreateTopicEnable=true, or explicitly on each broker
// of a cluster.
const ReadyTopic = "TXMSG_READY"

// WaitReady waits until RocketMQ at nameServer takes messages: a fresh
// producer sends one to [ReadyTopic]. An open port is not enough: a broker
// answers some seconds before it has registered with the name server, and
// a name server answers before any broker has registered. With brokers (a
// cluster) ready means more: the topic is created on every broker, the
// name server routes it to each, and each takes a message. It retries
// every second until ctx ends and then returns the last failure. Progress
// goes to log (nil: none). The probes are RocketMQ clients of this
// process: install its client logger (adapters/txrmq/rmqlog) before the
// first call, as before any other client.
func WaitReady(ctx context.Context, nameServer string, brokers []Broker, log io.Writer) error {
	return waitReady(ctx, nameServer, brokers, log, nil)
}

// waitReady is WaitReady that also calls check before each attempt and
// gives up with its error (a JVM that died).
func waitReady(ctx context.Context, nameServer string, brokers []Broker, log io.Writer, check func() error) error {
	addrs := splitAddrs(nameServer)
	if len(addrs) == 0 {
		return fmt.Errorf("no name server address in %q", nameServer)
	}
	if log == nil {
		log = io.Discard
	}
	start := time.Now()
	lastReport := start
	for attempt := 1; ; attempt++ {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		per := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < per {
			per = max(time.Until(dl), time.Second)
		}
		err := probe(ctx, addrs, per)
		if err == nil && len(brokers) > 0 {
			err = probeBrokers(ctx, addrs, brokers, per)
		}
		if err == nil {
			fmt.Fprintf(log, "rmq: RocketMQ at %s accepted a message on %s after %s (%d attempt(s))\n",
				nameServer, ReadyTopic, time.Since(start).Round(100*time.Millisecond), attempt)
			return nil
		}
		if time.Since(lastReport) >= 5*time.Second {
			fmt.Fprintf(log, "rmq: still waiting for RocketMQ at %s (%s elapsed): %v\n", nameServer, time.Since(start).Round(time.Second), err)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("RocketMQ at %s not ready after %s: %w", nameServer, time.Since(start).Round(time.Second), err)
		case <-time.After(time.Second):
		}
	}
}

func splitAddrs(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// probe starts a fresh producer (so no route or connection state is kept
// from a failed attempt), sends one message and shuts the producer down.
func probe(ctx context.Context, addrs []string, timeout time.Duration) error {
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(addrs)),
		producer.WithGroupName("TXMSG_READY_PRODUCER"),
		producer.WithInstanceName(fmt.Sprintf("rmqready-%d-%d", os.Getpid(), time.Now().UnixNano())),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(timeout),
	)
	if err != nil {
		return fmt.Errorf("new producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("start producer: %w", err)
	}
	defer func() { _ = p.Shutdown() }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := p.SendSync(ctx, primitive.NewMessage(ReadyTopic, []byte("ready "+time.Now().UTC().Format(time.RFC3339Nano))))
	if err != nil {
		return err
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("send status %d", res.Status)
	}
	return nil
}

var (
	admMu sync.Mutex
	adms  = map[string]admin.Admin{}
)

// sharedAdmin returns one admin client per name server for the process:
// closing one shuts down the client it shares.
func sharedAdmin(addrs []string) (admin.Admin, error) {
	admMu.Lock()
	defer admMu.Unlock()
	key := strings.Join(addrs, ";")
	if a, ok := adms[key]; ok {
		return a, nil
	}
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(addrs)))
	if err != nil {
		return nil, err
	}
	adms[key] = a
	return a, nil
}

// probeBrokers creates the probe topic on every broker and fails unless the
// name server routes it to each broker and each takes a message on its
// first queue.
func probeBrokers(ctx context.Context, addrs []string, brokers []Broker, timeout time.Duration) error {
	adm, err := sharedAdmin(addrs)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, b := range brokers {
		if err := adm.CreateTopic(ctx, admin.WithTopicCreate(ReadyTopic), admin.WithBrokerAddrCreate(b.Addr),
			admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
			return fmt.Errorf("%s (%s): create topic: %w", b.Name, b.Addr, err)
		}
	}
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(addrs)),
		producer.WithGroupName("TXMSG_READY_PRODUCER"),
		producer.WithInstanceName(fmt.Sprintf("rmqready-b-%d-%d", os.Getpid(), time.Now().UnixNano())),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(timeout),
		producer.WithQueueSelector(producer.NewManualQueueSelector()),
	)
	if err != nil {
		return fmt.Errorf("new producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("start producer: %w", err)
	}
	defer func() { _ = p.Shutdown() }()
	for _, b := range brokers {
		// A fresh producer fetches the route from the name server: the
		// send fails unless it routes the topic to this broker.
		msg := primitive.NewMessage(ReadyTopic, []byte("ready "+b.Name))
		msg.Queue = &primitive.MessageQueue{Topic: ReadyTopic, BrokerName: b.Name, QueueId: 0}
		res, err := p.SendSync(ctx, msg)
		if err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
		if res.Status != primitive.SendOK {
			return fmt.Errorf("%s: send status %d", b.Name, res.Status)
		}
	}
	return nil
}

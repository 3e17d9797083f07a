// Command rmqready waits until a RocketMQ name server and broker can really
// take messages: it sends a small message to a probe topic (created on the
// fly by a broker with autoCreateTopicEnable=true) and retries until the
// deadline. An open port is not enough: a broker answers on 10911 some
// seconds before it has registered with the name server, and a name server
// answers on 9876 before any broker has registered.
//
// Used by scripts/rocketmq.sh:
//
//	go run ./internal/testbed/cmd/rmqready -namesrv 127.0.0.1:9876 -timeout 120s
//
// With -brokers (a cluster: name=host:port,...), ready means more: the probe
// topic is created on every listed broker, the name server routes it to
// each of them, and one message is sent to a queue of each:
//
//	rmqready -namesrv 127.0.0.1:29876 -brokers broker-a=127.0.0.1:30911,broker-b=127.0.0.1:31911
//
// Exit status: 0 when a message was sent, 1 when the deadline passed, 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func main() {
	namesrv := flag.String("namesrv", envOr("TXMSG_NAMESRV", "127.0.0.1:9876"), "name server address(es), host:port, ';' or ',' separated")
	topic := flag.String("topic", "TXMSG_READY", "probe topic (auto-created by the broker)")
	timeout := flag.Duration("timeout", 120*time.Second, "give up after this long")
	interval := flag.Duration("interval", time.Second, "pause between attempts")
	quiet := flag.Bool("q", false, "print nothing on success")
	brokerList := flag.String("brokers", "", "cluster brokers, name=host:port comma separated: each must take a message")
	flag.Parse()
	brokers, err := parseBrokers(*brokerList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmqready:", err)
		os.Exit(2)
	}

	addrs := splitAddrs(*namesrv)
	if len(addrs) == 0 || *timeout <= 0 {
		fmt.Fprintln(os.Stderr, "rmqready: need -namesrv host:port and a positive -timeout")
		os.Exit(2)
	}
	rlog.SetLogLevel("error")

	start := time.Now()
	deadline := start.Add(*timeout)
	var lastErr error
	lastReport := start
	for attempt := 1; ; attempt++ {
		lastErr = probe(addrs, *topic, minDur(5*time.Second, time.Until(deadline)))
		if lastErr == nil && len(brokers) > 0 {
			lastErr = probeBrokers(addrs, *topic, brokers, minDur(5*time.Second, time.Until(deadline)))
		}
		if lastErr == nil {
			if !*quiet {
				fmt.Printf("rmqready: RocketMQ at %s accepted a message on %s after %s (%d attempt(s))\n",
					strings.Join(addrs, ";"), *topic, time.Since(start).Round(100*time.Millisecond), attempt)
			}
			return
		}
		if time.Now().Add(*interval).After(deadline) {
			break
		}
		if time.Since(lastReport) >= 5*time.Second {
			fmt.Printf("rmqready: still waiting for RocketMQ at %s (%s elapsed): %v\n",
				strings.Join(addrs, ";"), time.Since(start).Round(time.Second), lastErr)
			lastReport = time.Now()
		}
		time.Sleep(*interval)
	}
	fmt.Fprintf(os.Stderr, "rmqready: RocketMQ at %s not ready after %s: %v\n", strings.Join(addrs, ";"), *timeout, lastErr)
	os.Exit(1)
}

// probe starts a fresh producer (so no route or connection state is kept from
// a failed attempt), sends one message and shuts the producer down.
func probe(addrs []string, topic string, timeout time.Duration) error {
	if timeout < time.Second {
		timeout = time.Second
	}
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
	defer p.Shutdown()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msg := primitive.NewMessage(topic, []byte("ready "+time.Now().UTC().Format(time.RFC3339Nano)))
	res, err := p.SendSync(ctx, msg)
	if err != nil {
		return err
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("send status %d", res.Status)
	}
	return nil
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

type broker struct{ name, addr string }

func parseBrokers(s string) ([]broker, error) {
	var out []broker
	for _, part := range splitAddrs(s) {
		name, addr, ok := strings.Cut(part, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("-brokers: %q is not name=host:port", part)
		}
		out = append(out, broker{name, addr})
	}
	return out, nil
}

var (
	adm    admin.Admin
	admErr error
)

// probeBrokers creates topic on every broker and fails unless the name
// server routes topic to each broker and each takes a message on its first
// queue.
func probeBrokers(addrs []string, topic string, brokers []broker, timeout time.Duration) error {
	if timeout < time.Second {
		timeout = time.Second
	}
	if adm == nil && admErr == nil {
		// One admin client for the process: closing one shuts down the
		// client it shares.
		adm, admErr = admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(addrs)))
	}
	if admErr != nil {
		return fmt.Errorf("admin client: %w", admErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, b := range brokers {
		if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b.addr),
			admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
			return fmt.Errorf("%s (%s): create topic: %w", b.name, b.addr, err)
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
	defer p.Shutdown()
	for _, b := range brokers {
		// A fresh producer fetches the route from the name server: the
		// send fails unless it routes topic to this broker.
		msg := primitive.NewMessage(topic, []byte("ready "+b.name))
		msg.Queue = &primitive.MessageQueue{Topic: topic, BrokerName: b.name, QueueId: 0}
		res, err := p.SendSync(ctx, msg)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		if res.Status != primitive.SendOK {
			return fmt.Errorf("%s: send status %d", b.name, res.Status)
		}
	}
	return nil
}

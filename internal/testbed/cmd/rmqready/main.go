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
	flag.Parse()

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

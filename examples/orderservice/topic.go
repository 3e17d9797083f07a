package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// topicQueues is the queue count of a topic created by ensureTopic.
const topicQueues = 4

// ensureTopic creates cfg.Topic on the broker at cfg.CreateTopicOn unless
// the name servers already route it, and waits for the route. The
// consumer cannot start on a topic without one.
func ensureTopic(ctx context.Context, cfg Config) error {
	opts := []admin.AdminOption{admin.WithResolver(primitive.NewPassthroughResolver(cfg.NameServers))}
	if cfg.AccessKey != "" {
		opts = append(opts, admin.WithCredentials(primitive.Credentials{AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey}))
	}
	if cfg.Namespace != "" {
		opts = append(opts, admin.WithNamespace(cfg.Namespace))
	}
	// Each admin client gets its own instance name, so closing it closes
	// no other client of the process.
	adm, err := admin.NewAdmin(opts...)
	if err != nil {
		return fmt.Errorf("topic admin: %w", err)
	}
	defer adm.Close()

	name := cfg.Topic
	if cfg.Namespace != "" {
		name = cfg.Namespace + "%" + cfg.Topic
	}
	// The name servers' topic list, rather than a route query, which the
	// client logs as an error when the topic is missing.
	routed := func() bool {
		list, err := adm.FetchAllTopicList(ctx)
		return err == nil && slices.Contains(list.TopicList, name)
	}
	if routed() {
		return nil
	}
	err = adm.CreateTopic(ctx,
		admin.WithTopicCreate(cfg.Topic),
		admin.WithBrokerAddrCreate(cfg.CreateTopicOn),
		admin.WithReadQueueNums(topicQueues),
		admin.WithWriteQueueNums(topicQueues))
	if err != nil {
		return fmt.Errorf("create topic %s on %s: %w", cfg.Topic, cfg.CreateTopicOn, err)
	}
	// The broker registers the topic with the name servers on its next
	// heartbeat to them, usually within a second.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !routed() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s has no route after creation: %w", cfg.Topic, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

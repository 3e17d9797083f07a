// Package stack wires one txmsg delivery mode into a single value: the
// components that get a service's committed events to RocketMQ, built from
// one configuration, migrated, started and closed in the right order, with
// one health check. A [*Stack] is a [txmsg.Transactor], so a service
// changes mode by calling a different constructor and nothing else:
//
//   - [Transactional] is transactional mode: a barrier table
//     ([checker.Checker]), the transactional producer
//     ([txrmq.Transactional]) that sends half messages and answers the
//     broker's check-backs from that table, and the [txrmq.Sweeper] with
//     its own [txrmq.Publisher], which publishes the committed transactions
//     whose half messages the broker discarded while the database could not
//     answer.
//   - [Outbox] is local-table mode: the outbox table ([outbox.Outbox]),
//     written inside the local transaction, and one or more
//     [outbox.Relay]s publishing it through a [txrmq.Publisher].
//
// With Config.Reconcile, either mode also runs a [txrmq.Reconciler] in
// its background part: after a failover or a master restart that may have
// lost messages the broker had acknowledged, it publishes again the
// committed events of a recent window that the brokers no longer have.
//
// The consuming side ([txmsg.Inbox] and [txrmq.Consumer]) is not part of
// a stack: a service may consume without producing, and its handlers may
// send through the stack.
//
// # Lifecycle
//
// Build the stack, call [Stack.Migrate] (or apply the tables' SQL with a
// migration tool), then [Stack.Start] once the topics exist, and
// [Stack.Close] on the way out. Start starts the producer first, so a
// restarted service answers the broker's check-backs at once, and the
// background part (sweeper and forwarder, or relays) last; Close stops them in reverse
// order. [Stack.Health] is meant for readiness probes.
//
// # Groups
//
// Config.Group is the service's producer group. In transactional
// mode the broker sends check-backs to any live producer of that group, so
// every producer of the group must answer from the same database, and no
// plain producer may join it: a plain producer ignores check-backs. The
// sweeper's publisher therefore gets a group of its own, by default the
// producer group with [SweeperSuffix] appended, which is also the sweeper's
// consumer group. The forwarder of delayed messages (txmsg.WithDelay),
// part of the background in transactional mode, consumes and publishes in
// the group with [ForwarderSuffix] appended.
//
// # Parts
//
// A stack normally runs all its parts in one process. [Config.Parts] runs
// only some of them, for services that scale or isolate them apart: for
// example web processes that run [PartProducer] and one worker process
// that runs [PartBackground].
package stack

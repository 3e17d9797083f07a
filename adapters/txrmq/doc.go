// Package txrmq is txmsg's Apache RocketMQ adapter, built on
// rocketmq-client-go v2. Its name does not clash with the client's own
// package, which programs import beside it.
//
// It holds:
//
//   - [Transactional], the transactional-mode [txmsg.Transactor]: it sends
//     a half message, runs the local transaction with a barrier row
//     ([checker.Checker.Begin]) and commits or rolls the message back; the
//     broker's check-backs are answered from the barrier table, or, for a
//     transaction it has just finished, from its outcome cache;
//   - [Sweeper], which publishes the committed transactions whose half
//     messages the broker discarded after its last check-back, while the
//     database could not answer;
//   - [Publisher], a plain producer implementing [txmsg.Publisher], used by
//     the outbox relay (package adapters/outbox) and by the sweeper;
//   - [Forwarder], which sends the delayed messages of [Transactional]
//     (txmsg.WithDelay) on to their topics when they are due, since the
//     broker does not delay half messages;
//   - [Consumer], a push consumer that runs [txmsg.Route]s through a
//     [txmsg.Inbox], so each event's handler commits at most once per
//     consumer group.
//
// Package stack (github.com/txmsg/txmsg/stack) builds, starts and closes
// the producing components of either mode as one value; use this package
// directly for the consumer, or for wiring of your own.
//
// Every component's config embeds [Conn]: the name servers, ACL
// credentials, the namespace, TLS and the logger. Beside it each has its
// Group and its own settings; the producer-side configs carry the send
// settings and Hooks, while a consumer's events go to its inbox's hooks.
// Every config has WithDefaults, which fills its zero fields, and
// Validate, which checks a defaulted config and names the field at fault.
// Components are built with their New… function, which takes its
// dependencies first and its config last, fills the defaults, validates
// and connects nothing; they are started with Start and stopped with
// Close, which is idempotent.
// [Transactional.Health] and [Consumer.Health] report whether a started
// component can do its work now, for readiness probes.
//
// Start asks the name servers first, each within
// Conn.NameServerTimeout (3 s by default) and the caller's context. When
// none answers, the error wraps txmsg.ErrUnavailable and names each one
// with its error: consumers and the sweeper fail, producers start and log
// it. A topic the name servers have no route for is
// txmsg.ErrTopicNotFound, naming the command that creates it (txmsgctl
// topic create): consumers fail, producers log it. Consumers need their
// topics before Start.
//
// # Groups
//
// The broker sends a transaction's check-backs to any live producer of the
// group that sent it. So every producer of a transactional group must
// answer from the same database, and no plain producer (a [Publisher],
// the sweeper's included) may share that group: it would not answer.
//
// # Process-wide state
//
// rocketmq-client-go logs through one process-wide logger; the first
// component built routes it to its Conn.Logger (see package rmqlog).
// Conn.TLS is process-wide in the client as well.
package txrmq

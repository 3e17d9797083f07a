// Package outbox is txmsg's local-table mode: a [txmsg.Transactor] for
// brokers without transactional messages.
//
// [Outbox.Transact] runs the caller's local transaction and, in the same
// database transaction, inserts the message into an outbox table. A
// [Relay] then publishes pending rows through a [txmsg.Publisher] and marks
// them sent. The event exists if and only if the local transaction
// committed; it is published at least once, and consumers drop duplicates by
// txmsg ID (see txmsg.Inbox).
//
// # Wiring
//
//	ob, err := outbox.New(db, outbox.Config{})
//	...
//	relay, err := outbox.NewRelay(ob, publisher, outbox.RelayConfig{})
//	go relay.Run(ctx)
//
// A relay takes its table and buckets from its Outbox, and a commit
// through [Outbox.Transact] wakes the relays of that Outbox at once. Commits in other processes, and those made with
// [Outbox.EnqueueTx] without a following [Outbox.Notify], are found by
// polling.
//
// # Claiming
//
// Rows are spread over buckets when inserted (by sharding key, at random
// without one), and relays lease the buckets between them through the
// lease table. Each relay registers in the relay table every lease round,
// so all know how many relays there are and each holds its share,
// Buckets/relays or one more: when a relay joins, those above their new
// share give buckets up at their next lease round and it takes them at
// its own; a relay that stops releases its buckets and deregisters; a
// relay that died stops counting, and its buckets move to the others,
// once its row and leases are older than [RelayConfig.LeaseTTL]. A relay
// claims only from the buckets it holds, so relays added do not scan past
// one another's rows.
//
// A relay claims rows in READ COMMITTED with SELECT … FOR UPDATE SKIP
// LOCKED, publishes them and marks them sent in the same transaction, so
// relays never publish a row twice between them, even while a bucket
// changes hands. Without ordered mode rows are claimed in (bucket,
// next_attempt_at, id) order, the order of the table's index, so the
// claim locks only the rows it returns; the owner of bucket 0 also claims
// rows whose bucket is outside [0, Buckets). A relay
// that dies after publishing and before its commit leaves the rows pending:
// they are published again, and consumers drop the duplicates. A claim
// transaction that fails after publishing without the relay dying (InnoDB
// picks it as a deadlock victim, a lock wait times out, the connection is
// lost) does not: the relay applies the marks again in a new transaction,
// guarded to rows still as claimed, before it claims anything else. There is no
// "last id seen" cursor: auto-increment ids commit out of order.
//
// A claim reads its rows without bodies and loads the bodies as it
// publishes, within [RelayConfig.ClaimBytes] and
// [RelayConfig.PublishBytes], so a relay's memory does not grow with
// BatchSize × body size.
//
// A delayed message (txmsg.WithDelay) is inserted with next_attempt_at at
// its due time, kept in deliver_at as well, so claims take it only when it
// is due by the database's clock; after a cycle the relay sleeps until the
// next row becomes due when that comes before its poll. It is published
// as a plain message carrying its due time.
//
// # Failures
//
// A row the broker refuses (the Publisher's error wraps txmsg.ErrRejected
// or txmsg.ErrInvalidMessage) counts an attempt and is parked after
// [RelayConfig.MaxAttempts]. A row that failed because the broker or the
// route was unavailable ([txmsg.IsUnavailable]) counts nothing: it waits,
// backing off up to [RelayConfig.MaxWaitBackoff] (5 s), however long the
// outage lasts, and shows in [Stats].Waiting, [Relay.Health] and
// txmsg.HookRelayUnavailable. When the relay publishes again after an
// outage, or its Publisher signals that a broker came back
// ([txmsg.BrokerReturnNotifier], implemented by txrmq.Publisher), the
// waiting rows of its buckets are retried at once.
//
// # Ordered mode
//
// With [RelayConfig.Ordered], rows with the same sharding key are published
// in id order, which for one key is commit order. Keys are hashed into
// buckets at insert; each bucket is leased to one relay at a time, and the
// relay reads a bucket's pending rows in id order with a blocking locking
// read, so it waits for a writer whose outbox row is not committed yet
// instead of skipping it. A row that fails holds back the later rows of its
// key, and a row waiting for the broker never stops doing so; a row that
// is parked stops holding them back. See [RelayConfig] for
// the limits.
//
// # Database
//
// MySQL 8 or MariaDB 10.6 and later (for SKIP LOCKED); outbox.sql holds the
// tables. Timestamps are written in UTC and read back as time.Time, so the
// MySQL DSN needs parseTime=true.
//
// # Parked rows
//
// A row that failed [RelayConfig.MaxAttempts] times is parked
// ([StatusParked]): no relay publishes it until an operator requeues it
// ([Outbox.Requeue]) or deletes it ([Outbox.DeleteParked],
// [Outbox.PurgeParked]); [Outbox.List] with Status StatusParked lists
// them. The status column stores parked rows as "dead", the value of
// earlier releases.
package outbox

// Package txmsgtest is the behaviour suite that every [txmsg.Transactor]
// and every [txmsg.Publisher] passes against a real broker and a real
// database. txmsg's own modes run it (the transactional producer of
// adapters/txrmq and the local table of adapters/outbox run
// [RunTransactor]; txrmq.Publisher runs [RunPublisher]), and so can an
// implementation of your own, from a _test.go file of its package:
//
//	func TestConformance(t *testing.T) {
//		txmsgtest.RunTransactor(t, func(t *testing.T) txmsgtest.TransactorEnv {
//			db := openTestDatabase(t)          // a database of this test's own
//			topic := createTopic(t)            // a topic of this test's own
//			tr := mybroker.NewTransactor(db)   // the subject, started
//			t.Cleanup(func() { tr.Close() })
//			return txmsgtest.TransactorEnv{
//				Transactor: tr, DB: db, Topic: topic,
//				Observer: observe(t, topic), // every delivery of topic
//			}
//		})
//	}
//
// The suite takes everything from the caller: the subject, built fresh
// for each case by the setup function; the database its local
// transactions write to; a topic that exists; and an [Observer], which
// reports what a consumer of the topic received. [Recorder] is an Observer
// that any consumer callback can feed. The cases run in parallel, each
// with an environment of its own, and wait up to a minute for a delivery.
//
// The cases say what a service may rely on whatever the mode:
//
//   - Transactor: a committed transaction's event is delivered exactly
//     once, with its tag, keys, sharding key, properties and body; a local
//     transaction that fails or panics delivers nothing and writes
//     nothing; a message that breaks a rule is refused before anything is
//     sent or written; an ID already used is refused; IDs that differ in
//     case alone are two messages.
//   - Publisher: a published message is delivered exactly once with its
//     fields; a batch delivers each of its messages; a message that fails
//     alone fails alone (a [*txmsg.BatchError] whose other entries are
//     nil); and failures say which kind they are, because the outbox relay
//     acts on it: an error that wraps [txmsg.ErrUnavailable] (the broker
//     or the route is away) leaves the row waiting, without counting an
//     attempt, however long the outage lasts, while one that wraps
//     [txmsg.ErrRejected] or [txmsg.ErrInvalidMessage] (the message
//     itself will never go through) counts an attempt and, after
//     MaxAttempts, parks the row for an operator. Given a database
//     ([PublisherEnv].DB), the suite runs the outbox relay over the
//     Publisher and checks exactly that on the rows.
//
// The cases that need more than a working broker skip, saying what is
// missing, when the environment lacks it: a Publisher whose broker is away
// ([PublisherEnv].Unavailable), a message the broker refuses
// ([PublisherEnv].Rejected), a database for the relay.
package txmsgtest

// Package txmsg makes a database write and the event that announces it one
// atomic step, for services that keep their data in SQL through gorm and
// publish through a message broker such as Apache RocketMQ.
//
// The package itself knows no broker. It defines the message envelope
// ([Message]), the one interface both delivery modes implement
// ([Transactor]), the typed layer application code uses ([Producer],
// [Topic], [Codec]), and the consumer side: [Delivery], [Handler] and the
// [Inbox] that gives handlers exactly-once effects.
//
// Two modes implement [Transactor]:
//
//   - transactional mode, in package adapters/txrmq, sends a RocketMQ half
//     message, runs the local transaction, and answers the broker's
//     check-backs from a barrier table (package checker);
//   - local-table mode, in package adapters/outbox, writes the event to an
//     outbox table inside the local transaction and relays it afterwards.
//
// A service changes mode by wiring a different [Transactor]; its business
// code does not change.
//
// Those adapters build on package [github.com/txmsg/txmsg/txmsg/driver],
// which holds what an adapter calls to keep txmsg's guarantees (run a
// received message through its route and inbox, park it, call the hooks).
// Applications do not need it.
//
// # Transact opens its own transaction
//
// [Transactor.Transact] (and [Producer.Send]) begins a new database
// transaction on the handle its Transactor was built with, and passes it to
// the local function. It does not join a transaction the caller already
// holds: called inside db.Transaction(func(tx *gorm.DB) error {...}), it
// runs on a second connection, so its writes and the event commit
// independently of the outer transaction (the outer one can still roll
// back after the event is out), and with a pool of one connection it waits
// for the connection the caller holds until ctx ends. Transact cannot tell, since
// the outer transaction is never passed to it.
//
// Put the business writes in the local function instead, on the tx it is
// given, and call Transact outside any transaction:
//
//	_, err := producer.Send(ctx, event, func(ctx context.Context, tx *gorm.DB) error {
//		return tx.Create(&order).Error // commits or rolls back with the event
//	})
//
// Code that must keep a transaction of its own can, in local-table mode,
// write the event into that transaction with the outbox's EnqueueTx.
// Transactional mode cannot join a transaction that is already open: the
// half message must be sent before the local transaction begins.
package txmsg

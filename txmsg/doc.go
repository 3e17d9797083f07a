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
package txmsg

// Package quickstart holds txmsg's quick-start programs, one per delivery
// mode: transactional/main.go and outbox/main.go. Each opens the database,
// creates the tables, starts the mode's stack and a consumer, saves one
// order with its event, waits until the consumer has handled it, and
// closes everything.
//
// Run both against the test bed with `make quickstart`, or one with
//
//	go run ./examples/quickstart/transactional
//
// after creating its database and topic. Settings come from the
// environment: QUICKSTART_DSN (default
// txmsg:txmsg@tcp(127.0.0.1:13306)/txmsg_quickstart?parseTime=true),
// QUICKSTART_NAMESRV (default 127.0.0.1:9876) and QUICKSTART_TOPIC
// (default quickstart, or quickstart-outbox). The producer and consumer
// groups are named after the topic.
//
// The tests in this directory run both programs against the test bed and
// check that README.md shows transactional/main.go verbatim.
package quickstart

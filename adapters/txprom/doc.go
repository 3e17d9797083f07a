// Package txprom exports txmsg's events as Prometheus metrics.
//
// It lives in its own Go module, so txmsg's core module does not depend on
// Prometheus. [Metrics] implements txmsg's hook interfaces: put it in the
// Hooks of every component's config, and register it with a Prometheus
// registry. [OutboxCollector] reads an outbox table's depth at scrape
// time.
//
//	m := txprom.New(txprom.Config{})
//	reg.MustRegister(m)
//	tr, _ := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{Conn: conn, Group: "orders", Hooks: txmsg.Hooks{m}})
//	inbox, _ := txmsg.NewInbox(db, txmsg.InboxConfig{Hooks: txmsg.Hooks{m}})
//	oc, _ := txprom.NewOutboxCollector(ob.Stats, txprom.OutboxConfig{Table: ob.Table()})
//	reg.MustRegister(oc)
//
// Metrics (histograms in seconds, with [Config.Buckets]):
//
//	txmsg_half_sends_total{topic,result}            counter   half messages sent (result ok|error), transactional mode
//	txmsg_half_send_seconds{topic}                  histogram half-send round trip
//	txmsg_local_transactions_total{topic,state}     counter   local transactions ended (state committed|rolled_back|unknown), both modes
//	txmsg_local_transaction_seconds{topic}          histogram local transaction time
//	txmsg_checkbacks_total{answer}                  counter   check-backs answered (answer commit|rollback|unknown)
//	txmsg_checkback_seconds                         histogram time to answer one check-back
//	txmsg_relay_batches_total                       counter   batches the outbox relay published
//	txmsg_relay_messages_total{result}              counter   relayed messages (result published|failed)
//	txmsg_relay_batch_size                          histogram messages per batch
//	txmsg_relay_publish_seconds                     histogram time to publish one batch
//	txmsg_relay_unavailable_total                   counter   relayed messages that failed because the broker or route was unavailable (they wait, no attempt counted)
//	txmsg_relay_broker_unavailable                  gauge     1 after a relay publish failed for the broker's sake, 0 after one went through
//	txmsg_consumer_messages_total{group,topic,outcome} counter messages a consumer decided about (outcome handled|duplicate|parked|failed)
//	txmsg_consumer_handle_seconds{group,topic}      histogram decode + dedupe + handler + commit
//
// [OutboxCollector], per outbox table:
//
//	txmsg_outbox_rows{table,status}                 gauge     rows by status (pending|sent|parked)
//	txmsg_outbox_oldest_pending_age_seconds{table}  gauge     age of the oldest pending row, 0 when none
//	txmsg_outbox_waiting_rows{table}                gauge     pending rows whose last publish failed because the broker was unavailable
//	txmsg_outbox_stats_up{table}                    gauge     1 when the last scrape's query succeeded
package txprom

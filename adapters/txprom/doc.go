// Package txprom exports txmsg's events as Prometheus metrics.
//
// It lives in its own Go module, so txmsg's core module does not depend on
// Prometheus. [Metrics] implements txmsg's hook interfaces: put it in the
// Hooks of every component's config, register it with a Prometheus
// registry, and declare the components the process runs (AddTransactional,
// AddOutbox, AddRelay, AddSweeper, AddConsumer), which creates their
// series at zero, so that alerts see 0 rather than no data before the
// first event. [OutboxCollector] reads an outbox table's depth at scrape
// time; [WatchCheckBackCache] exports a transactional producer's
// check-back cache.
//
//	m := txprom.New(txprom.Config{ConstLabels: prometheus.Labels{"service": "orders"}})
//	reg.MustRegister(m)
//	tr, _ := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{Conn: conn, Group: "orders", Hooks: txmsg.Hooks{m}})
//	m.AddTransactional("orders", "order-events")
//	txprom.WatchCheckBackCache(m, "orders", tr.CheckBackCacheStats)
//	inbox, _ := txmsg.NewInbox(db, txmsg.InboxConfig{Hooks: txmsg.Hooks{m}})
//	m.AddConsumer("billing", "order-events")
//	oc, _ := txprom.NewOutboxCollector(ob.Stats, txprom.OutboxConfig{Table: ob.Table(), Metrics: m})
//	reg.MustRegister(oc)
//
// The result label takes one vocabulary everywhere: ok|error for an
// attempt, committed|rolled_back|unknown for a transaction's outcome,
// handled|duplicate|parked|error for a consumer's decision, hit|miss for
// a cache lookup, checked|missing|republished for a reconciler's events (see [ResultOK] and the other Result constants).
//
// Metrics (histograms in seconds, with [Config.Buckets]):
//
//	txmsg_half_sends_total{topic,result}                counter   half messages sent (ok|error), transactional mode
//	txmsg_half_send_seconds{topic}                      histogram half-send round trip
//	txmsg_local_transactions_total{topic,result}        counter   local transactions ended (committed|rolled_back|unknown), both modes
//	txmsg_local_transaction_seconds{topic}              histogram local transaction time
//	txmsg_invalid_sends_total{topic}                    counter   messages Transact refused before any write (txmsg.ErrInvalidMessage), both modes
//	txmsg_checkbacks_total{group,topic,result}          counter   check-backs answered (committed|rolled_back|unknown)
//	txmsg_checkback_seconds{group,topic}                histogram time to answer one check-back
//	txmsg_sweeper_held_total{group,topic}               counter   half messages the sweeper held because their outcome cannot be known
//	txmsg_relay_batches_total{relay,table}              counter   batches an outbox relay published
//	txmsg_relay_messages_total{relay,table,result}      counter   relayed messages (ok|error)
//	txmsg_relay_batch_size{relay,table}                 histogram messages per batch
//	txmsg_relay_publish_seconds{relay,table}            histogram time to publish one batch
//	txmsg_relay_unavailable_total{relay,table}          counter   relayed messages that failed because the broker or route was unavailable (they wait, no attempt counted)
//	txmsg_relay_broker_unavailable{relay,table}         gauge     1 after a relay publish failed for the broker's sake, 0 after one went through
//	txmsg_consumer_messages_total{group,topic,result}   counter   messages a consumer decided about (handled|duplicate|parked|error)
//	txmsg_consumer_handle_seconds{group,topic}          histogram decode + dedupe + handler + commit
//	txmsg_consumer_lateness_seconds{group,topic}        histogram how long after its due time a delayed message was received (handled ones)
//	txmsg_reconcile_passes_total{reconciler,result}     counter   reconciler passes over a window (ok|error)
//	txmsg_reconcile_events_total{reconciler,result}     counter   committed events a reconciler looked up (checked|missing|republished)
//
// [WatchCheckBackCache], per transactional producer group:
//
//	txmsg_checkback_cache_lookups_total{group,result}   counter   check-backs looked up in the outcome cache (hit|miss)
//	txmsg_checkback_cache_evictions_total{group}        counter   outcomes dropped for size or age
//	txmsg_checkback_cache_entries{group}                gauge     outcomes held
//
// [OutboxCollector], per outbox table:
//
//	txmsg_outbox_rows{table,status}                     gauge     rows by status (pending|sent|parked)
//	txmsg_outbox_oldest_pending_age_seconds{table}      gauge     age of the oldest pending row, 0 when none
//	txmsg_outbox_waiting_rows{table}                    gauge     pending rows whose last publish failed because the broker was unavailable
//	txmsg_outbox_stats_up{table}                        gauge     1 when the last scrape's query succeeded
package txprom

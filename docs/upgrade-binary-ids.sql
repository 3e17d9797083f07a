-- Converts txmsg tables created before their identifier columns were
-- VARBINARY (default table names; replace them if yours differ). This is
-- what `txmsgctl migrate` runs, as plain SQL for a DBA or an online schema
-- change tool. Each statement rebuilds its table and blocks writes to it
-- while it runs; see docs/reliability.md, "Upgrading tables created before
-- identifiers were binary".
--
-- First check that no value is longer than its column in bytes: each query
-- below must return no rows. With STRICT_TRANS_TABLES off the server would
-- cut such a value (`txmsgctl migrate` checks and refuses by itself).
-- SELECT tx_id FROM txmsg_barrier WHERE OCTET_LENGTH(tx_id) > 255;
-- SELECT id FROM txmsg_inbox WHERE OCTET_LENGTH(consumer_group) > 255 OR OCTET_LENGTH(msg_id) > 255 OR OCTET_LENGTH(topic) > 127;
-- SELECT id FROM txmsg_dead_letter WHERE OCTET_LENGTH(consumer_group) > 255 OR OCTET_LENGTH(msg_id) > 255 OR OCTET_LENGTH(broker_message_id) > 255 OR OCTET_LENGTH(topic) > 127;
-- SELECT id FROM txmsg_outbox WHERE OCTET_LENGTH(msg_id) > 255 OR OCTET_LENGTH(topic) > 127 OR OCTET_LENGTH(tag) > 255 OR OCTET_LENGTH(`keys`) > 1024 OR OCTET_LENGTH(sharding_key) > 255;
-- SELECT bucket FROM txmsg_outbox_lease WHERE OCTET_LENGTH(owner) > 255 OR OCTET_LENGTH(wanted_by) > 255;

-- The barrier's topic and message columns (checker.Config.KeepMessages, for
-- the reconciler) are newer than binary IDs: leave the two ADD COLUMN lines
-- out if the table has them.
ALTER TABLE `txmsg_barrier`
  MODIFY `tx_id` varbinary(255) NOT NULL,
  ADD COLUMN `topic` varbinary(127) DEFAULT NULL,
  ADD COLUMN `message` longblob DEFAULT NULL;

ALTER TABLE `txmsg_inbox`
  MODIFY `consumer_group` varbinary(255) NOT NULL,
  MODIFY `msg_id` varbinary(255) NOT NULL,
  MODIFY `topic` varbinary(127) NOT NULL;

ALTER TABLE `txmsg_dead_letter`
  MODIFY `consumer_group` varbinary(255) NOT NULL,
  MODIFY `msg_id` varbinary(255) NOT NULL,
  MODIFY `broker_message_id` varbinary(255) NOT NULL,
  MODIFY `topic` varbinary(127) NOT NULL;

ALTER TABLE `txmsg_outbox`
  MODIFY `msg_id` varbinary(255) NOT NULL,
  MODIFY `topic` varbinary(127) NOT NULL,
  MODIFY `tag` varbinary(255) NOT NULL DEFAULT '',
  MODIFY `keys` varbinary(1024) NOT NULL DEFAULT '',
  MODIFY `sharding_key` varbinary(255) NOT NULL DEFAULT '';

ALTER TABLE `txmsg_outbox_lease`
  MODIFY `owner` varbinary(255) NOT NULL DEFAULT '',
  MODIFY `wanted_by` varbinary(255) NOT NULL DEFAULT '';

-- The index unordered relays claim by (each from the buckets it leases).
-- `txmsgctl migrate` and Outbox.Migrate add it to a table without it; it
-- is built online (ALGORITHM=INPLACE), without blocking writes.
ALTER TABLE `txmsg_outbox`
  ADD KEY `idx_outbox_bucket_due` (`status`, `bucket`, `next_attempt_at`, `id`);

-- The table relays register in, so that each knows how many relays share
-- the buckets (adapters/outbox/outbox.sql). `txmsgctl migrate` and
-- Outbox.Migrate create it. Relays of earlier releases ignore it.
CREATE TABLE IF NOT EXISTS `txmsg_outbox_relay` (
  `name` varbinary(255) NOT NULL,
  `seen_at` datetime(6) NOT NULL,
  `lease_ttl_us` bigint NOT NULL DEFAULT 0,
  `unavailable_since` datetime(6) DEFAULT NULL,
  `last_error` varchar(1024) NOT NULL DEFAULT '',
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- A relay table created without the relays' health columns gets them
-- from `txmsgctl migrate` and Outbox.Migrate, or from this statement
-- (for such a table only: the CREATE above left it as it was):
-- ALTER TABLE `txmsg_outbox_relay`
--   ADD COLUMN `lease_ttl_us` bigint NOT NULL DEFAULT 0,
--   ADD COLUMN `unavailable_since` datetime(6) DEFAULT NULL,
--   ADD COLUMN `last_error` varchar(1024) NOT NULL DEFAULT '';

-- The due time of delayed messages (txmsg.WithDelay). `txmsgctl migrate`
-- and Outbox.Migrate add it; on MySQL 8.0.12+ and MariaDB 10.3+ a
-- nullable column added last is added instantly. Until it exists, the
-- outbox refuses delayed messages and takes all others as before; relays
-- of earlier releases ignore it (they publish delayed rows when due,
-- without the due time).
ALTER TABLE `txmsg_outbox`
  ADD COLUMN `deliver_at` datetime(6) DEFAULT NULL;

-- txmsg consumer tables (MySQL 8 / MariaDB 10.6+), the same as
-- txmsg.Inbox.Migrate creates. Identifier columns are VARBINARY (sizes in
-- bytes): they compare byte for byte whatever the collation, so messages
-- "Order-1" and "order-1" are two messages. To convert tables created with
-- varchar columns, run `txmsgctl migrate` (docs/reliability.md).

-- One row per (consumer group, message) handled: the dedupe record, inserted
-- first in the handler's transaction. Purge rows older than the broker's
-- redelivery horizon (txmsg.Inbox.Purge).
CREATE TABLE IF NOT EXISTS `txmsg_inbox` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `consumer_group` varbinary(255) NOT NULL,
  `msg_id` varbinary(255) NOT NULL,
  `topic` varbinary(127) NOT NULL,
  `handled_at` datetime(6) NOT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_txmsg_inbox_group_msg` (`consumer_group`,`msg_id`),
  KEY `idx_txmsg_inbox_handled_at` (`handled_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The parked table (txmsg.ParkedRow): messages a consumer parked, such as
-- bodies that could not be decoded, with their raw bytes.
CREATE TABLE IF NOT EXISTS `txmsg_dead_letter` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `consumer_group` varbinary(255) NOT NULL,
  `msg_id` varbinary(255) NOT NULL,
  `broker_message_id` varbinary(255) NOT NULL,
  `topic` varbinary(127) NOT NULL,
  `tag` varchar(255) NOT NULL,                   -- as received; not compared
  `keys` varchar(1024) NOT NULL,
  `properties` text NOT NULL,
  `body` longblob DEFAULT NULL,
  `error` text NOT NULL,
  `attempt` bigint(20) NOT NULL,
  `parked_at` datetime(6) NOT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_txmsg_dead_group_msg` (`consumer_group`,`msg_id`),
  KEY `idx_txmsg_dead_parked_at` (`parked_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The failing table (txmsg.FailingRow): one row per (consumer group,
-- message) whose handler returned an error or panicked, written outside the
-- handler's rolled-back transaction and deleted when a later delivery is
-- handled or parked. Rows of messages the broker dead-lettered stay until
-- purged (txmsg.Inbox.PurgeFailing, txmsgctl purge -failing-older-than).
-- The body is the first 64 KiB (body_size is the whole size).
CREATE TABLE IF NOT EXISTS `txmsg_inbox_failing` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `consumer_group` varbinary(255) NOT NULL,
  `msg_id` varbinary(255) NOT NULL,
  `broker_message_id` varbinary(255) NOT NULL,
  `topic` varbinary(127) NOT NULL,
  `tag` varchar(255) NOT NULL,                   -- as received; not compared
  `keys` varchar(1024) NOT NULL,
  `properties` text NOT NULL,
  `body` mediumblob DEFAULT NULL,
  `body_size` bigint(20) NOT NULL,
  `failures` bigint(20) NOT NULL,
  `attempt` bigint(20) NOT NULL,
  `error` text NOT NULL,
  `dead_lettered` tinyint(1) NOT NULL,
  `first_failed_at` datetime(6) NOT NULL,
  `last_failed_at` datetime(6) NOT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_txmsg_failing_group_msg` (`consumer_group`,`msg_id`),
  KEY `idx_txmsg_failing_last_failed_at` (`last_failed_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

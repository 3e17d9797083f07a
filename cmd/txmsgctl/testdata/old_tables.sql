-- The tables as txmsg created them before its identifier columns were
-- VARBINARY (varchar in the table's collation). TestMigrateConvertsOldTables
-- creates them on a database with the server's default collation.

CREATE TABLE IF NOT EXISTS `txmsg_barrier` (
  `tx_id` varchar(255) NOT NULL,
  `state` varchar(16) NOT NULL,
  `created_at` datetime(6) NOT NULL,
  PRIMARY KEY (`tx_id`),
  KEY `idx_txmsg_barrier_created_at` (`created_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS `txmsg_inbox` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `consumer_group` varchar(255) NOT NULL,
  `msg_id` varchar(255) NOT NULL,
  `topic` varchar(127) NOT NULL,
  `handled_at` datetime(6) NOT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_txmsg_inbox_group_msg` (`consumer_group`,`msg_id`),
  KEY `idx_txmsg_inbox_handled_at` (`handled_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS `txmsg_dead_letter` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `consumer_group` varchar(255) NOT NULL,
  `msg_id` varchar(255) NOT NULL,
  `broker_message_id` varchar(255) NOT NULL,
  `topic` varchar(127) NOT NULL,
  `tag` varchar(255) NOT NULL,
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

CREATE TABLE IF NOT EXISTS `txmsg_outbox` (
  `id` bigint NOT NULL AUTO_INCREMENT,            -- the relay's order
  `msg_id` varchar(255) NOT NULL,                 -- txmsg ID
  `topic` varchar(127) NOT NULL,
  `tag` varchar(255) NOT NULL DEFAULT '',
  `keys` varchar(1024) NOT NULL DEFAULT '',       -- space-separated
  `sharding_key` varchar(255) NOT NULL DEFAULT '',
  `bucket` int NOT NULL DEFAULT 0,                -- ordered mode: hash(sharding_key) % buckets
  `body` longblob NOT NULL,
  `properties` text NOT NULL,                     -- JSON object
  `status` varchar(16) NOT NULL,                  -- pending, sent, dead
  `attempts` int NOT NULL DEFAULT 0,              -- failed publish attempts
  `next_attempt_at` datetime(6) NOT NULL,
  `last_error` varchar(1024) NOT NULL DEFAULT '',
  `created_at` datetime(6) NOT NULL,
  `updated_at` datetime(6) NOT NULL,
  `sent_at` datetime(6) DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_outbox_msg_id` (`msg_id`),
  KEY `idx_outbox_due` (`status`, `next_attempt_at`, `id`),
  KEY `idx_outbox_bucket` (`status`, `bucket`, `id`),
  KEY `idx_outbox_status_updated` (`status`, `updated_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS `txmsg_outbox_lease` (
  `bucket` int NOT NULL,
  `owner` varchar(255) NOT NULL DEFAULT '',
  `expires_at` datetime(6) NOT NULL,
  `wanted_by` varchar(255) NOT NULL DEFAULT '',
  `wanted_at` datetime(6) NOT NULL DEFAULT '1970-01-01 00:00:01.000000',
  PRIMARY KEY (`bucket`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

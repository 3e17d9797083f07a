-- txmsg local-table mode: the outbox table and the lease and relay tables
-- of the relays, for MySQL 8 / MariaDB >= 10.6 (SKIP LOCKED). This is what
-- outbox.(*Outbox).Migrate creates with the default table name. Keep the two
-- in step (TestMigrateMatchesSQL checks it). For another table name, replace
-- txmsg_outbox everywhere.
--
-- Identifier columns are VARBINARY (sizes in bytes): they compare byte for
-- byte whatever the collation, so IDs "Order-1" and "order-1" are two
-- messages. To convert tables created with varchar columns, run
-- `txmsgctl migrate` (docs/reliability.md).

CREATE TABLE IF NOT EXISTS `txmsg_outbox` (
  `id` bigint NOT NULL AUTO_INCREMENT,            -- the relay's order
  `msg_id` varbinary(255) NOT NULL,               -- txmsg ID
  `topic` varbinary(127) NOT NULL,
  `tag` varbinary(255) NOT NULL DEFAULT '',
  `keys` varbinary(1024) NOT NULL DEFAULT '',     -- space-separated
  `sharding_key` varbinary(255) NOT NULL DEFAULT '',
  `bucket` int NOT NULL DEFAULT 0,                -- hash(sharding_key) % buckets, random without a key
  `body` longblob NOT NULL,
  `properties` text NOT NULL,                     -- JSON object
  `status` varchar(16) NOT NULL,                  -- pending, sent, dead
  `attempts` int NOT NULL DEFAULT 0,              -- failed publish attempts
  `next_attempt_at` datetime(6) NOT NULL,
  `last_error` varchar(1024) NOT NULL DEFAULT '',
  `created_at` datetime(6) NOT NULL,
  `updated_at` datetime(6) NOT NULL,
  `sent_at` datetime(6) DEFAULT NULL,
  `deliver_at` datetime(6) DEFAULT NULL,          -- due time of a delayed message, NULL for none
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_outbox_msg_id` (`msg_id`),
  KEY `idx_outbox_due` (`status`, `next_attempt_at`, `id`),
  KEY `idx_outbox_bucket` (`status`, `bucket`, `id`),            -- ordered claims
  KEY `idx_outbox_bucket_due` (`status`, `bucket`, `next_attempt_at`, `id`), -- unordered claims
  KEY `idx_outbox_status_updated` (`status`, `updated_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS `txmsg_outbox_lease` (
  `bucket` int NOT NULL,
  `owner` varbinary(255) NOT NULL DEFAULT '',
  `expires_at` datetime(6) NOT NULL,
  `wanted_by` varbinary(255) NOT NULL DEFAULT '',
  `wanted_at` datetime(6) NOT NULL DEFAULT '1970-01-01 00:00:01.000000',
  PRIMARY KEY (`bucket`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per running relay, written every lease round (LeaseTTL/3) and
-- deleted when the relay stops. The rows seen within LeaseTTL are the
-- live relays that share the buckets. Rows of relays that died are deleted
-- 10 x LeaseTTL after their last round. Relays of releases before this
-- table neither read nor write it. Each round also writes the relay's
-- health: unavailable_since is set while its publishes fail because the
-- broker or the route is unavailable, with the broker's error in
-- last_error. For a relay table without the last three columns, run
-- Migrate (or add them as below): relays write them once they exist.
CREATE TABLE IF NOT EXISTS `txmsg_outbox_relay` (
  `name` varbinary(255) NOT NULL,
  `seen_at` datetime(6) NOT NULL,
  `lease_ttl_us` bigint NOT NULL DEFAULT 0,       -- the relay's LeaseTTL
  `unavailable_since` datetime(6) DEFAULT NULL,
  `last_error` varchar(1024) NOT NULL DEFAULT '',
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

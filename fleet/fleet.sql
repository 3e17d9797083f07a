-- txmsg's instance table, for MySQL 8 / MariaDB >= 10.6. This is what
-- fleet.Migrate creates with the default table name (stack.Stack.Migrate
-- and txmsgctl migrate call it). Keep the two in step
-- (TestMigrateMatchesSQL checks it). For another table name, replace
-- txmsg_instances.
--
-- One row per running consumer, ordered consumer, sweeper and
-- transactional producer, written every Heartbeat.Interval (10 s) with the
-- database's clock and deleted when the component closes; rows whose
-- heartbeat is older than Heartbeat.Expiry (1 h) are deleted by the live
-- instances. The counters start at zero with each instance.

CREATE TABLE IF NOT EXISTS `txmsg_instances` (
  `kind` varbinary(32) NOT NULL,                  -- consumer, ordered_consumer, sweeper, producer, forwarder
  `name` varbinary(255) NOT NULL,                 -- the group
  `instance` varbinary(255) NOT NULL,             -- host-pid-random
  `started_at` datetime(6) NOT NULL,
  `heartbeat_at` datetime(6) NOT NULL,
  `interval_us` bigint NOT NULL DEFAULT 0,        -- Heartbeat.Interval
  `healthy` tinyint(1) NOT NULL DEFAULT 1,        -- its Health at the last heartbeat
  `last_error` varchar(1024) NOT NULL DEFAULT '',
  `sent` bigint NOT NULL DEFAULT 0,
  `handled` bigint NOT NULL DEFAULT 0,
  `duplicates` bigint NOT NULL DEFAULT 0,
  `parked` bigint NOT NULL DEFAULT 0,
  `failed` bigint NOT NULL DEFAULT 0,
  `swept` bigint NOT NULL DEFAULT 0,
  `checkback_commit` bigint NOT NULL DEFAULT 0,
  `checkback_rollback` bigint NOT NULL DEFAULT 0,
  `checkback_unknown` bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (`kind`, `name`, `instance`),
  KEY `idx_instances_heartbeat` (`heartbeat_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The dashboard's history, which it creates itself when missing: one row
-- per sample (Config.SampleInterval, 15 s), written by the one dashboard
-- holding the lease row of txmsg_history_lease, with the fleet's counts
-- during the sample (the sum of the increases of the instances'
-- counters), the outbox rows published, and the depths at its time.
-- Rows older than Config.HistoryRetention (24 h) are deleted by the
-- sampling dashboard.
CREATE TABLE IF NOT EXISTS `txmsg_history` (
  `at` datetime(6) NOT NULL,                      -- the database's clock
  `span_us` bigint NOT NULL,                      -- what the sample covers
  `sampler` varbinary(255) NOT NULL DEFAULT '',   -- the dashboard that wrote it
  `sent` bigint NOT NULL DEFAULT 0,
  `handled` bigint NOT NULL DEFAULT 0,
  `duplicates` bigint NOT NULL DEFAULT 0,
  `parked` bigint NOT NULL DEFAULT 0,
  `failed` bigint NOT NULL DEFAULT 0,
  `swept` bigint NOT NULL DEFAULT 0,
  `checkback_commit` bigint NOT NULL DEFAULT 0,
  `checkback_rollback` bigint NOT NULL DEFAULT 0,
  `checkback_unknown` bigint NOT NULL DEFAULT 0,
  `published` bigint NOT NULL DEFAULT 0,          -- outbox rows sent
  `pending` bigint NOT NULL DEFAULT 0,            -- outbox rows pending at `at`
  `parked_rows` bigint NOT NULL DEFAULT 0,        -- outbox rows parked at `at`
  `barrier` bigint NOT NULL DEFAULT 0,            -- barrier rows at `at`
  PRIMARY KEY (`at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS `txmsg_history_lease` (
  `name` varbinary(64) NOT NULL,
  `owner` varbinary(255) NOT NULL DEFAULT '',
  `expires_at` datetime(6) NOT NULL,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

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
  `kind` varbinary(32) NOT NULL,                  -- consumer, ordered_consumer, sweeper, producer
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

-- txmsg barrier table (MySQL 8 / MariaDB 10.6+), the same as checker.Migrate
-- creates. One row per transactional send: 'committed' is inserted by the
-- local transaction, 'rolled_back' by a check-back that found no committed
-- row. Keep rows longer than the broker's check window (checker.Purge).
-- topic and message are written only with checker.Config.KeepMessages (for
-- the reconciler); NULL otherwise. To add them to an existing table:
--   ALTER TABLE `txmsg_barrier` ADD COLUMN `topic` varbinary(127) DEFAULT NULL,
--     ADD COLUMN `message` longblob DEFAULT NULL;
-- tx_id is VARBINARY: IDs compare byte for byte whatever the collation, so
-- "Order-1" and "order-1" are two transactions. To convert a table created
-- with varchar(255), run `txmsgctl migrate` (docs/reliability.md).
CREATE TABLE IF NOT EXISTS `txmsg_barrier` (
  `tx_id` varbinary(255) NOT NULL,
  `state` varchar(16) NOT NULL,
  `created_at` datetime(6) NOT NULL,
  `topic` varbinary(127) DEFAULT NULL,
  `message` longblob DEFAULT NULL,
  PRIMARY KEY (`tx_id`),
  KEY `idx_txmsg_barrier_created_at` (`created_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The purge horizon: checker.Purge records here, before deleting, the cutoff
-- it purges up to. A check-back for a transaction without a barrier row that
-- began before it is answered UNKNOWN, never ROLLBACK.
CREATE TABLE IF NOT EXISTS `txmsg_barrier_horizon` (
  `id` bigint NOT NULL,
  `purged_before` datetime(6) NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

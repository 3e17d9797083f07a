package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/testbed"
)

// env is one run's database and topics. Everything in it is made for the
// run and removed by cleanup.
type env struct {
	cfg   *config
	log   *slog.Logger
	runID string

	adminDB *gorm.DB // the DSN's own database: creates and drops the run's
	dbName  string
	dsn     string   // the run's database, with the caller's DSN options
	db      *gorm.DB // measured phases: the caller's DSN options, pooled for the workers
	fillDSN string   // unmeasured bulk writes: interpolateParams=true

	rmq    admin.Admin
	topics []string
}

// Pool sizes: every worker (and relay) holds one connection at a time;
// idle connections are kept so that no measured operation pays for a new
// connection (database/sql keeps only 2 idle connections by default).
func poolSize(workers int) int { return workers + 8 }

func setup(ctx context.Context, cfg *config, log *slog.Logger, pr *progress) (*env, error) {
	e := &env{cfg: cfg, log: log, runID: runID()}
	base, err := mysql.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("-dsn is not a MySQL DSN: %w", err)
	}
	if e.adminDB, err = testbed.Open(base.FormatDSN()); err != nil {
		return nil, fmt.Errorf("database at %s: %w (start it with scripts/mysql.sh start)", base.Addr, err)
	}
	e.dbName = testbed.DBPrefix + "bench_" + e.runID
	if err := e.adminDB.WithContext(ctx).Exec("CREATE DATABASE `" + e.dbName + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin").Error; err != nil {
		return nil, fmt.Errorf("create database %s: %w", e.dbName, err)
	}
	pr.printf("run %s: database %s on %s", e.runID, e.dbName, base.Addr)

	run := base.Clone()
	run.DBName = e.dbName
	e.dsn = run.FormatDSN()
	fill := run.Clone()
	fill.InterpolateParams = true
	e.fillDSN = fill.FormatDSN()
	if e.db, err = openPool(e.dsn, poolSize(cfg.Workers)); err != nil {
		_ = e.cleanup(ctx)
		return nil, err
	}
	// The instance table the producers' heartbeats write, as a deployment
	// has it.
	if err := fleet.Migrate(ctx, e.db, fleet.DefaultTable); err != nil {
		_ = e.cleanup(ctx)
		return nil, err
	}

	e.rmq, err = admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{cfg.NameServer})))
	if err != nil {
		_ = e.cleanup(ctx)
		return nil, fmt.Errorf("rocketmq admin: %w", err)
	}
	return e, nil
}

// openPool opens dsn with gorm's defaults, as an application would, with
// a pool of size connections, all kept idle between uses.
func openPool(dsn string, size int) (*gorm.DB, error) {
	db, err := testbed.Open(dsn)
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(size)
	sqlDB.SetMaxIdleConns(size)
	return db, nil
}

func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("0102_150405") + "_" + hex.EncodeToString(b[:])
}

// topic creates the run's topic for purpose and waits for its route.
func (e *env) topic(ctx context.Context, purpose string) (string, error) {
	name := "txbench_" + e.runID + "_" + purpose
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := e.rmq.CreateTopic(ctx,
		admin.WithTopicCreate(name),
		admin.WithBrokerAddrCreate(e.cfg.Broker),
		admin.WithReadQueueNums(e.cfg.Queues),
		admin.WithWriteQueueNums(e.cfg.Queues))
	if err != nil {
		return "", fmt.Errorf("create topic %s: %w", name, err)
	}
	e.topics = append(e.topics, name)
	for {
		mqs, err := e.rmq.FetchPublishMessageQueues(ctx, name)
		if err == nil && len(mqs) > 0 {
			return name, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("topic %s has no route after creation: %v", name, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// group returns a producer group name unique to the run.
func (e *env) group(purpose string) string { return "txbench_" + e.runID + "_" + purpose }

// dropTable removes a table a phase is done with, so later phases do not
// share the buffer pool with it.
func (e *env) dropTable(ctx context.Context, tables ...string) {
	for _, t := range tables {
		if err := e.db.WithContext(ctx).Exec("DROP TABLE IF EXISTS `" + t + "`").Error; err != nil {
			e.log.Warn("drop table", "table", t, "err", err)
		}
	}
}

// cleanup drops the run's database and deletes its topics, unless -keep.
func (e *env) cleanup(ctx context.Context) error {
	var errs []error
	if e.db != nil {
		if sqlDB, err := e.db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
	if e.cfg.Keep {
		return nil
	}
	if e.adminDB != nil {
		if e.dbName != "" {
			if err := e.adminDB.WithContext(ctx).Exec("DROP DATABASE IF EXISTS `" + e.dbName + "`").Error; err != nil {
				errs = append(errs, fmt.Errorf("drop database %s: %w", e.dbName, err))
			}
		}
		if sqlDB, err := e.adminDB.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
	if e.rmq != nil {
		for _, t := range e.topics {
			err := e.rmq.DeleteTopic(ctx,
				admin.WithTopicDelete(t),
				admin.WithBrokerAddrDelete(e.cfg.Broker),
				admin.WithNameSrvAddr([]string{e.cfg.NameServer}))
			if err != nil {
				errs = append(errs, fmt.Errorf("delete topic %s: %w", t, err))
			}
		}
		_ = e.rmq.Close()
	}
	return errors.Join(errs...)
}

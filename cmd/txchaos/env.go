package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
	"github.com/txmsg/txmsg/txmsg"
)

// prepare fills in what the config leaves to the environment and makes
// the run directory.
func (r *runner) prepare() error {
	if r.cfg.Root == "" {
		root, err := rmqproc.FindRoot()
		if err != nil {
			return err
		}
		r.cfg.Root = root
	}
	if r.cfg.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		r.cfg.Exe = exe
	}
	if r.cfg.PauseMax < r.cfg.PauseMin {
		r.cfg.PauseMax = r.cfg.PauseMin
	}
	for _, k := range r.cfg.Kinds {
		if !slices.Contains(allKinds, k) {
			return fmt.Errorf("unknown fault kind %q (kinds: %v)", k, allKinds)
		}
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	r.runID = time.Now().UTC().Format("0102_150405") + "_" + hex.EncodeToString(b[:])
	r.dir = r.cfg.Dir
	if r.dir == "" {
		r.dir = filepath.Join(r.cfg.Root, ".cache", "chaos", r.runID)
	}
	r.attemptDir = filepath.Join(r.dir, "attempts")
	for _, d := range []string{r.attemptDir, filepath.Join(r.dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if r.cfg.Infra {
		rmq, err := brokerProcs(r.cfg, &scriptLog{path: filepath.Join(r.dir, "logs", "scripts.log")})
		if err != nil {
			return err
		}
		r.rmq = rmq
	}
	return nil
}

// brokerProcs returns the RocketMQ processes the broker faults act on:
// cfg's name server and broker, or the cluster's, with the version, cache
// and mode of the environment (as scripts/rocketmq.sh has them).
func brokerProcs(cfg config, log io.Writer) (*rmqproc.Instance, error) {
	rc, err := rmqproc.FromEnv(cfg.Cluster)
	if cfg.HA != "" {
		rc, err = rmqproc.HAFromEnv()
		rc.HA = cfg.HA
	}
	if err != nil {
		return nil, err
	}
	rc.Root = cfg.Root
	rc.NameServer = cfg.NameServer
	rc.Log = log
	if cfg.Cluster {
		rc.Brokers = cfg.Brokers
	} else {
		rc.Brokers = []rmqproc.Broker{{Name: "broker-a", Addr: cfg.Broker}}
	}
	return rmqproc.New(rc)
}

// setup makes the run's database, tables and topics.
func (r *runner) setup(ctx context.Context) error {
	base, err := mysql.ParseDSN(r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("-dsn is not a MySQL DSN: %w", err)
	}
	if r.adminDB, err = testbed.Open(base.FormatDSN()); err != nil {
		return fmt.Errorf("database at %s: %w (start it with scripts/mysql.sh start)", base.Addr, err)
	}
	r.dbName = testbed.DBPrefix + "chaos_" + r.runID
	if err := r.adminDB.WithContext(ctx).Exec("CREATE DATABASE `" + r.dbName + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin").Error; err != nil {
		return fmt.Errorf("create database %s: %w", r.dbName, err)
	}
	run := base.Clone()
	run.DBName = r.dbName
	r.dsn = run.FormatDSN()
	if r.db, err = openDB(r.dsn, 8); err != nil {
		return err
	}
	chk, err := checker.New(r.db, checker.Config{})
	if err != nil {
		return err
	}
	ob, err := outbox.New(r.db, outbox.Config{})
	if err != nil {
		return err
	}
	inbox, err := txmsg.NewInbox(r.db, txmsg.InboxConfig{})
	if err != nil {
		return err
	}
	for _, m := range []func(context.Context) error{chk.Migrate, ob.Migrate, inbox.Migrate, func(ctx context.Context) error { return migrateWorkload(ctx, r.db) }} {
		if err := m(ctx); err != nil {
			return err
		}
	}

	r.topics = map[string]string{}
	for _, m := range modes {
		name := "chaos_" + r.runID + "_" + m
		if err := r.createTopic(ctx, name); err != nil {
			return err
		}
		r.topics[m] = name
	}
	r.delayTopic = "chaos_" + r.runID + "_delayed"
	return r.createTopic(ctx, r.delayTopic)
}

func (r *runner) createTopic(ctx context.Context, name string) error {
	if err := testbed.CreateTopicOn(ctx, r.cfg.NameServer, r.brokerAddrs(), name, 4); err != nil {
		return err
	}
	if r.cfg.HA == "" {
		return nil
	}
	for _, b := range r.cfg.Brokers {
		if err := r.topicOn(ctx, r.rmq.SlaveAddr(b.Name), name); err != nil {
			return err
		}
	}
	return nil
}

// teardown drops the run's database and topics unless keep.
func (r *runner) teardown(keep bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r.db != nil {
		if sqlDB, err := r.db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
	if keep {
		r.logf("kept database %s, topics %v and run directory %s", r.dbName, r.topics, r.dir)
	}
	if !keep {
		for _, t := range r.topics {
			_ = testbed.DeleteTopicOn(ctx, r.cfg.NameServer, r.brokerAddrs(), t)
		}
		if r.delayTopic != "" {
			_ = testbed.DeleteTopicOn(ctx, r.cfg.NameServer, r.brokerAddrs(), r.delayTopic)
		}
	}
	if r.adminDB != nil {
		if !keep && r.dbName != "" {
			_ = r.adminDB.WithContext(ctx).Exec("DROP DATABASE IF EXISTS `" + r.dbName + "`").Error
		}
		if sqlDB, err := r.adminDB.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
}

// brokerAddrs are the brokers topics are created on: every broker of the
// cluster (on the HA form the masters as configured), or the one broker.
func (r *runner) brokerAddrs() []string {
	if !r.cfg.Cluster {
		return []string{r.cfg.Broker}
	}
	var out []string
	for _, b := range r.cfg.Brokers {
		out = append(out, b.Addr)
	}
	return out
}

// topicsOn creates the run's topics on the slave at addr: on the HA form
// a slave copies its master's topics only once a minute, and a consumer
// reads a dead master's queues from its slave. After a failover the new
// slave starts from an empty store.
func (r *runner) topicsOn(ctx context.Context, addr string) error {
	for _, t := range append(slices.Collect(maps.Values(r.topics)), r.delayTopic) {
		if err := r.topicOn(ctx, addr, t); err != nil {
			return err
		}
	}
	return nil
}

// topicOn creates topic on the broker at addr alone; the name server
// routes it already through the masters.
func (r *runner) topicOn(ctx context.Context, addr, topic string) error {
	return testbed.CreateTopicOn(ctx, r.cfg.NameServer, []string{addr}, topic, 4)
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/wire"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

// commonSet is everything both modes share. It needs a txmsg.Transactor
// and a Mode, which one of the mode sets below provides.
var commonSet = wire.NewSet(
	NewMetrics,
	provideDB,
	provideInbox,
	provideOrderTopic,
	provideOrderProducer,
	NewOrders,
	NewInventory,
	provideConsumer,
	NewAPI,
	NewApp,
)

// transactionalSet is transactional mode: half messages, with the broker's
// check-backs answered from the barrier table.
var transactionalSet = wire.NewSet(
	provideChecker,
	provideTransactional,
	wire.Bind(new(txmsg.Transactor), new(*txrmq.Transactional)),
	provideSweeperPublisher,
	provideSweeper,
	newTransactionalMode,
)

// outboxSet is local-table mode: an outbox table written in the order's
// transaction, and a relay that publishes it.
var outboxSet = wire.NewSet(
	provideChecker,
	provideOutbox,
	wire.Bind(new(txmsg.Transactor), new(*outbox.Outbox)),
	providePublisher,
	provideRelay,
	newOutboxMode,
)

// Pool sizes: each running consumer handler and each order being placed
// holds one connection.
const (
	maxOpenConns = 48
	maxIdleConns = 24
)

func provideDB(cfg Config) (*gorm.DB, func(), error) {
	dsn, err := mysql.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, nil, fmt.Errorf("dsn is not a valid MySQL DSN")
	}
	dsn.ParseTime = true // the models hold time.Time
	db, err := gorm.Open(gmysql.Open(dsn.FormatDSN()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB.SetMaxOpenConns(maxOpenConns)
	sqlDB.SetMaxIdleConns(maxIdleConns)
	sqlDB.SetConnMaxLifetime(30 * time.Minute)
	return db, func() { _ = sqlDB.Close() }, nil
}

func provideInbox(db *gorm.DB, log *slog.Logger, m *Metrics) (*txmsg.Inbox, error) {
	return txmsg.NewInbox(db, txmsg.InboxConfig{Logger: log, Hooks: m.Hooks()})
}

func provideOrderTopic(cfg Config) txmsg.Topic[OrderCreated] {
	return txmsg.Topic[OrderCreated]{Name: cfg.Topic, Tag: "created"}
}

func provideOrderProducer(tr txmsg.Transactor, topic txmsg.Topic[OrderCreated]) (*txmsg.Producer[OrderCreated], error) {
	return txmsg.NewProducer(tr, topic)
}

func provideConsumer(cfg Config, log *slog.Logger, inbox *txmsg.Inbox, topic txmsg.Topic[OrderCreated], inv *Inventory) (*txrmq.Consumer, error) {
	return txrmq.NewConsumer(
		// The consumer's events reach the hooks through the inbox.
		txrmq.ConsumerConfig{Config: cfg.rocketmq(cfg.ConsumerGroup, log, nil)},
		inbox,
		txmsg.Handle(topic, inv.OnOrderCreated),
	)
}

func provideChecker(db *gorm.DB, log *slog.Logger) (*checker.Checker, error) {
	return checker.New(db, checker.Config{Logger: log})
}

func provideTransactional(cfg Config, log *slog.Logger, db *gorm.DB, chk *checker.Checker, m *Metrics) (*txrmq.Transactional, error) {
	return txrmq.NewTransactional(txrmq.TransactionalConfig{
		Config: cfg.rocketmq(cfg.ProducerGroup, log, m.Hooks()),
		Topics: []string{cfg.Topic},
	}, db, chk)
}

// sweeperGroup names both the sweeper's consumer group and its
// publisher's producer group.
func sweeperGroup(cfg Config) string { return cfg.ProducerGroup + "-sweeper" }

// provideSweeper consumes the half messages the broker discarded after
// its last check-back.
func provideSweeper(cfg Config, log *slog.Logger, chk *checker.Checker, pub *txrmq.Publisher) (*txrmq.Sweeper, error) {
	return txrmq.NewSweeper(txrmq.SweeperConfig{
		Config:         cfg.rocketmq(sweeperGroup(cfg), log, nil),
		ProducerGroups: []string{cfg.ProducerGroup},
	}, chk, pub)
}

func provideOutbox(db *gorm.DB, log *slog.Logger, m *Metrics) (*outbox.Outbox, error) {
	return outbox.New(db, outbox.Config{Logger: log, Hooks: m.Hooks()})
}

// providePublisher starts the relay's producer, in the service's producer
// group. During a switch from transactional mode, the broker sends that
// group's check-backs to it as well: it answers them from the barrier.
func providePublisher(cfg Config, log *slog.Logger, chk *checker.Checker) (*txrmq.Publisher, func(), error) {
	return newPublisher(cfg, log, cfg.ProducerGroup, chk)
}

// provideSweeperPublisher starts the sweeper's producer. Its group is not
// the transactional producer's, so no check-back reaches it.
func provideSweeperPublisher(cfg Config, log *slog.Logger) (*txrmq.Publisher, func(), error) {
	return newPublisher(cfg, log, sweeperGroup(cfg), nil)
}

// newPublisher builds a publisher; its mode starts it, after App.Start has
// made sure the topic exists: a publisher started earlier caches "no
// route" for the topic until the client's next route refresh, up to 30 s.
// Its cleanup closes it if wiring fails later (Close is idempotent).
func newPublisher(cfg Config, log *slog.Logger, group string, chk *checker.Checker) (*txrmq.Publisher, func(), error) {
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Config: cfg.rocketmq(group, log, nil), Topics: []string{cfg.Topic}, Checker: chk})
	if err != nil {
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close(context.Background()) }, nil
}

func provideRelay(db *gorm.DB, pub *txrmq.Publisher, ob *outbox.Outbox, log *slog.Logger, m *Metrics) (*outbox.Relay, error) {
	return outbox.NewRelay(db, pub, outbox.RelayConfig{Outbox: ob, Logger: log, Hooks: m.Hooks()})
}

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

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
)

// commonSet is everything both modes share. It needs the *stack.Stack,
// the service's txmsg.Transactor, that one of the mode sets below
// provides.
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
var transactionalSet = wire.NewSet(provideTransactionalStack, bindTransactor)

// outboxSet is local-table mode: an outbox table written in the order's
// transaction, and a relay that publishes it.
var outboxSet = wire.NewSet(provideOutboxStack, bindTransactor)

// bindTransactor makes the stack the Transactor the order producer sends
// through.
var bindTransactor = wire.Bind(new(txmsg.Transactor), new(*stack.Stack))

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
		inbox,
		[]txmsg.Route{txmsg.Handle(topic, inv.OnOrderCreated)},
		txrmq.ConsumerConfig{Conn: cfg.rocketmq(log), Group: cfg.ConsumerGroup},
	)
}

// stackConfig is what both modes' stacks share: the service's producer
// group and topic, its logger, its metrics hooks and the reconciler,
// which publishes again the committed events a broker failover lost (in
// transactional mode it makes the barrier rows keep their messages).
func stackConfig(cfg Config, log *slog.Logger, m *Metrics) stack.Config {
	return stack.Config{
		RocketMQ:   cfg.rocketmq(log),
		Group:      cfg.ProducerGroup,
		Topics:     []string{cfg.Topic},
		Logger:     log,
		Hooks:      m.Hooks(),
		Reconcile:  cfg.Reconcile,
		Reconciler: txrmq.ReconcilerConfig{Window: cfg.ReconcileWindow},
	}
}

// provideTransactionalStack builds the checker, the transactional producer
// and the sweeper (with its own publisher, in the group
// <producer-group>-sweeper). App.Start starts it after making sure the
// topic exists. The cleanup closes it if wiring fails later; Close is
// idempotent.
func provideTransactionalStack(cfg Config, log *slog.Logger, db *gorm.DB, m *Metrics) (*stack.Stack, func(), error) {
	st, err := stack.Transactional(db, stack.TransactionalConfig{Config: stackConfig(cfg, log, m)})
	if err != nil {
		return nil, nil, err
	}
	return st, func() { _ = st.Close(context.Background()) }, nil
}

// provideOutboxStack builds the outbox and a relay publishing it through a
// publisher in the service's producer group.
func provideOutboxStack(cfg Config, log *slog.Logger, db *gorm.DB, m *Metrics) (*stack.Stack, func(), error) {
	// The relays' publisher is in the service's producer group. During a
	// switch from transactional mode the broker sends that group's
	// check-backs to it as well: it answers them from the barrier.
	chk, err := checker.New(db, checker.Config{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	st, err := stack.Outbox(db, stack.OutboxConfig{Config: stackConfig(cfg, log, m), Publisher: txrmq.PublisherConfig{Checker: chk}})
	if err != nil {
		return nil, nil, err
	}
	return st, func() { _ = st.Close(context.Background()) }, nil
}

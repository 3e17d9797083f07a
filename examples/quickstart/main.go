// Command quickstart saves an order and publishes its event in one atomic
// step, then handles the event in a consumer. It needs MySQL 8 or MariaDB
// 10.6+ and a RocketMQ topic.
//
//	go run ./examples/quickstart                # transactional mode
//	go run ./examples/quickstart -mode outbox   # local-table mode
//
// The mode is the only difference: one line picks the stack, and the
// producer, the consumer and the order are the same in both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
)

// Order is both the business row and the event's body.
type Order struct {
	ID     string `gorm:"primaryKey;size:36" json:"id"`
	Amount int    `json:"amount"`
}

func main() {
	mode := flag.String("mode", stack.ModeTransactional, "delivery mode: "+stack.ModeTransactional+" or "+stack.ModeOutbox)
	flag.Parse()
	if err := run(context.Background(), *mode); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, mode string) (err error) {
	// parseTime=true is required: txmsg's tables hold timestamps.
	db, err := gorm.Open(mysql.Open(env("QUICKSTART_DSN", "txmsg:txmsg@tcp(127.0.0.1:13306)/txmsg_quickstart?parseTime=true")))
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	topic := txmsg.Topic[Order]{Name: env("QUICKSTART_TOPIC", "quickstart")}
	rmq := txrmq.Conn{NameServers: []string{env("QUICKSTART_NAMESRV", "127.0.0.1:9876")}}
	cfg := stack.Config{RocketMQ: rmq, Group: topic.Name + "-producer", Topics: []string{topic.Name}}

	// The mode: everything below this switch is the same in both.
	var st *stack.Stack
	switch mode {
	case stack.ModeTransactional: // the barrier table, the transactional producer and the sweeper
		st, err = stack.Transactional(db, stack.TransactionalConfig{Config: cfg})
	case stack.ModeOutbox: // the outbox table, and a relay that publishes it
		st, err = stack.Outbox(db, stack.OutboxConfig{Config: cfg})
	default:
		return fmt.Errorf("-mode %q: use transactional or outbox", mode)
	}
	if err != nil {
		return err
	}
	// A consumer whose handler commits once per event, with the event's inbox row.
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	if err != nil {
		return err
	}
	order := Order{ID: txmsg.NewID(), Amount: 42}
	handled := make(chan struct{}, 1)
	route := txmsg.Handle(topic, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[Order]) error {
		fmt.Printf("handling order %s (amount %d), delivery %d\n", d.Event.ID, d.Event.Amount, d.Attempt)
		if d.Event.ID == order.ID {
			select {
			case handled <- struct{}{}:
			default:
			}
		}
		return nil // writes through tx commit together with the inbox row
	})
	consumerCfg := txrmq.ConsumerConfig{Conn: rmq, Group: topic.Name + "-consumer"}
	consumer, err := txrmq.NewConsumer(inbox, []txmsg.Route{route}, consumerCfg)
	if err != nil {
		return err
	}

	migrateOrders := func(ctx context.Context) error { return db.WithContext(ctx).AutoMigrate(&Order{}) }
	for _, migrate := range []func(context.Context) error{migrateOrders, st.Migrate, inbox.Migrate} {
		if err := migrate(ctx); err != nil {
			return err
		}
	}
	if err := st.Start(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close(context.Background())) }()
	if err := consumer.Start(ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, consumer.Close(context.Background())) }()

	// The order row and the event commit together, or neither does.
	orders, err := txmsg.NewProducer(st, topic)
	if err != nil {
		return err
	}
	receipt, err := orders.Send(ctx, order, func(ctx context.Context, tx *gorm.DB) error {
		return tx.Create(&order).Error
	})
	if err != nil {
		return fmt.Errorf("save order: %w", err)
	}
	fmt.Printf("saved order %s, event %s %s (%s mode)\n", order.ID, receipt.ID, receipt.State, st.Mode())
	select {
	case <-handled:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("order %s not handled within a minute", order.ID)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

package outbox_test

import (
	"context"
	"log"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/txmsg"
)

// Example wires the local-table mode: an Outbox as the service's
// Transactor and a Relay publishing through RocketMQ. It needs a database
// and a broker, so it is compiled but not run.
func Example() {
	ctx := context.Background()
	var db *gorm.DB // the service's database

	ob, err := outbox.New(db, outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil { // or apply outbox.sql
		log.Fatal(err)
	}
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Config: txrmq.Config{
		NameServers: []string{"127.0.0.1:9876"},
		Group:       "order-service",
	}})
	if err != nil {
		log.Fatal(err)
	}
	if err := pub.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer pub.Close(ctx)
	relay, err := outbox.NewRelay(db, pub, outbox.RelayConfig{Outbox: ob})
	if err != nil {
		log.Fatal(err)
	}
	go relay.Run(ctx)

	// Business code sees only a txmsg.Transactor.
	var tr txmsg.Transactor = ob
	receipt, err := tr.Transact(ctx, &txmsg.Message{Topic: "order-created", Body: []byte(`{"id":42}`)},
		func(ctx context.Context, tx *gorm.DB) error {
			return tx.Exec("INSERT INTO orders (id) VALUES (42)").Error
		})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("order 42 committed; event %s will be published", receipt.ID)
}

// ExampleOutbox_EnqueueTx adds events to a transaction the caller already
// holds, then wakes the relays once it has committed.
func ExampleOutbox_EnqueueTx() {
	ctx := context.Background()
	var db *gorm.DB
	ob, _ := outbox.New(db, outbox.Config{})

	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("UPDATE stock SET n = n - 1 WHERE sku = ?", "A-1").Error; err != nil {
			return err
		}
		return ob.EnqueueTx(ctx, tx,
			&txmsg.Message{Topic: "stock-changed", ShardingKey: "A-1", Body: []byte(`{"sku":"A-1","delta":-1}`)})
	})
	if err != nil {
		log.Fatal(err)
	}
	ob.Notify() // no after-commit hook in gorm: say it yourself, or wait for the next poll
}

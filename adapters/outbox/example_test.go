package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestMain runs the examples against the test bed's broker and database,
// each with a database and topic of its own, or skips them when the test
// bed is down (see testbed.RunWithExamples).
func TestMain(m *testing.M) { os.Exit(testbed.RunWithExamples(m)) }

// exampleOrder is the business row of the examples.
type exampleOrder struct {
	ID int64 `gorm:"primaryKey;autoIncrement:false"`
}

// waitSent waits until the outbox holds sent rows and nothing pending,
// for a minute at most, and returns its stats.
func waitSent(ctx context.Context, ob *outbox.Outbox, sent int64) (outbox.Stats, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := ob.Stats(ctx)
		if err == nil && s.Sent >= sent && s.Pending == 0 {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, errors.Join(err, errors.New("rows not sent within a minute"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Example wires the local-table mode: an Outbox as the service's
// Transactor and a Relay publishing its rows through RocketMQ. (Package
// stack wires the same for you.)
func Example() {
	ctx := context.Background()
	db, _ := testbed.ExampleDB("outbox")    // the service's database; its DSN has parseTime=true
	topic := testbed.ExampleTopic("orders") // an existing topic

	ob, err := outbox.New(db, outbox.Config{})
	if err != nil {
		panic(err)
	}
	if err := ob.Migrate(ctx); err != nil { // or apply outbox.sql
		panic(err)
	}
	if err := db.AutoMigrate(&exampleOrder{}); err != nil {
		panic(err)
	}
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{
		NameServers: []string{testbed.NameServer()}, // the service's producer group
	}, Group: testbed.ExampleName("orders"), Topics: []string{topic}})
	if err != nil {
		panic(err)
	}
	if err := pub.Start(ctx); err != nil {
		panic(err)
	}
	defer pub.Close(ctx)
	relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{})
	if err != nil {
		panic(err)
	}
	runCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error)
	go func() { relayDone <- relay.Run(runCtx) }()

	// Business code sees only a txmsg.Transactor.
	var tr txmsg.Transactor = ob
	receipt, err := tr.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte(`{"order_id":42}`)},
		func(ctx context.Context, tx *gorm.DB) error { return tx.Create(&exampleOrder{ID: 42}).Error })
	fmt.Println(receipt.State, err)
	stats, err := waitSent(ctx, ob, 1)
	fmt.Printf("sent %d, pending %d, parked %d, %v\n", stats.Sent, stats.Pending, stats.Parked, err)

	stopRelay() // a batch being published is finished and marked first
	fmt.Println(<-relayDone)
	// Output:
	// committed <nil>
	// sent 1, pending 0, parked 0, <nil>
	// <nil>
}

// EnqueueTx adds events to a transaction the caller already holds; once it
// has committed, Notify wakes the relays of this process at once instead
// of at their next poll.
func ExampleOutbox_EnqueueTx() {
	ctx := context.Background()
	db, _ := testbed.ExampleDB("enqueue")
	topic := testbed.ExampleTopic("stock")

	ob, err := outbox.New(db, outbox.Config{})
	if err != nil {
		panic(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		panic(err)
	}
	if err := db.AutoMigrate(&exampleOrder{}); err != nil {
		panic(err)
	}
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&exampleOrder{ID: 7}).Error; err != nil {
			return err
		}
		return ob.EnqueueTx(ctx, tx,
			&txmsg.Message{Topic: topic, ShardingKey: "A-1", Body: []byte(`{"sku":"A-1","delta":-1}`)},
			&txmsg.Message{Topic: topic, ShardingKey: "A-1", Body: []byte(`{"sku":"A-1","delta":-2}`)})
	})
	if err != nil {
		panic(err)
	}
	ob.Notify() // gorm has no after-commit hook: say it yourself, or wait for the next poll
	stats, err := ob.Stats(ctx)
	fmt.Printf("pending %d, %v\n", stats.Pending, err)

	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.ExampleName("stock"), Topics: []string{topic}})
	if err != nil {
		panic(err)
	}
	if err := pub.Start(ctx); err != nil {
		panic(err)
	}
	defer pub.Close(ctx)
	// An ordered relay publishes the rows of one sharding key in commit order.
	relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{Ordered: true})
	if err != nil {
		panic(err)
	}
	runCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error)
	go func() { relayDone <- relay.Run(runCtx) }()
	stats, err = waitSent(ctx, ob, 2)
	fmt.Printf("sent %d, pending %d, %v\n", stats.Sent, stats.Pending, err)
	stopRelay()
	fmt.Println(<-relayDone)
	// Output:
	// pending 2, <nil>
	// sent 2, pending 0, <nil>
	// <nil>
}

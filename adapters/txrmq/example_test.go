package txrmq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
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

// orderCreated is the event of the examples.
type orderCreated struct {
	OrderID int64 `json:"order_id"`
}

// receive waits for the next value of ch, for a minute at most.
func receive[T any](ch <-chan T) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-time.After(time.Minute):
		var zero T
		return zero, errors.New("nothing arrived within a minute")
	}
}

// A transactional producer runs the local transaction between the half
// message and its commit. The barrier row it writes first lets the broker's
// check-backs be answered from the database alone.
func ExampleNewTransactional() {
	ctx := context.Background()
	db, _ := testbed.ExampleDB("transactional") // the service's database; its DSN has parseTime=true
	topic := testbed.ExampleTopic("orders")     // an existing topic
	group := testbed.ExampleName("orders")      // the service's producer group

	chk, err := checker.New(db, checker.Config{})
	if err != nil {
		panic(err)
	}
	if err := chk.Migrate(ctx); err != nil { // or apply checker/barrier.sql
		panic(err)
	}
	if err := db.AutoMigrate(&exampleOrder{}); err != nil {
		panic(err)
	}
	tr, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: group,
		Topics: []string{topic},
	})
	if err != nil {
		panic(err)
	}
	if err := tr.Start(ctx); err != nil {
		panic(err)
	}
	defer tr.Close(ctx)

	receipt, err := tr.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte(`{"order_id":42}`)},
		func(ctx context.Context, tx *gorm.DB) error { return tx.Create(&exampleOrder{ID: 42}).Error })
	fmt.Println(receipt.State, err)
	state, err := chk.Lookup(ctx, receipt.ID)
	fmt.Println("barrier:", state, err)

	errOutOfStock := errors.New("out of stock")
	receipt, err = tr.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte(`{"order_id":43}`)},
		func(ctx context.Context, tx *gorm.DB) error {
			if err := tx.Create(&exampleOrder{ID: 43}).Error; err != nil {
				return err
			}
			return errOutOfStock // rolls back the order; the half message is rolled back too
		})
	fmt.Println(receipt.State, errors.Is(err, errOutOfStock))
	var orders int64
	if err := db.Model(&exampleOrder{}).Count(&orders).Error; err != nil {
		panic(err)
	}
	fmt.Println("orders:", orders)
	// Output:
	// committed <nil>
	// barrier: committed <nil>
	// rolled_back true
	// orders: 1
}

// The sweeper backs up a transactional producer: it publishes, through a
// publisher of its own group, the committed transactions whose half
// messages the broker discarded because the database could not answer the
// check-backs for the whole check window. Until then it has nothing to do.
// (Package stack wires the three for you.)
func ExampleNewSweeper() {
	ctx := context.Background()
	db, _ := testbed.ExampleDB("sweeper")
	topic := testbed.ExampleTopic("orders")
	producerGroup := testbed.ExampleName("orders")
	sweeperGroup := producerGroup + "-sweeper" // never the producer group: a plain producer cannot answer check-backs
	nameServers := []string{testbed.NameServer()}

	chk, err := checker.New(db, checker.Config{})
	if err != nil {
		panic(err)
	}
	if err := chk.Migrate(ctx); err != nil {
		panic(err)
	}
	tr, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{
		Conn: txrmq.Conn{NameServers: nameServers}, Group: producerGroup,
		Topics: []string{topic},
	})
	if err != nil {
		panic(err)
	}
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: nameServers}, Group: sweeperGroup})
	if err != nil {
		panic(err)
	}
	sw, err := txrmq.NewSweeper(chk, pub, txrmq.SweeperConfig{
		Conn: txrmq.Conn{NameServers: nameServers}, Group: sweeperGroup,
		ProducerGroups: []string{producerGroup}, // the groups whose transactions chk's database records
	})
	if err != nil {
		panic(err)
	}
	// Start the producer first, the sweeper last; close in reverse order.
	for _, start := range []func(context.Context) error{tr.Start, pub.Start, sw.Start} {
		if err := start(ctx); err != nil {
			panic(err)
		}
	}
	receipt, err := tr.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte(`{"order_id":42}`)},
		func(ctx context.Context, tx *gorm.DB) error { return nil })
	fmt.Println(receipt.State, err)
	fmt.Println(sw.Close(ctx), pub.Close(ctx), tr.Close(ctx))
	// Output:
	// committed <nil>
	// <nil> <nil> <nil>
}

// outcomeHook sends what the inbox decided about each message to a channel.
type outcomeHook chan txmsg.Outcome

func (h outcomeHook) OnConsumed(_ context.Context, _ string, _ *txmsg.Received, o txmsg.Outcome, _ error, _ time.Duration) {
	h <- o
}

// A consumer runs each event's handler in a transaction that records the
// event in the inbox, and acknowledges it once that has committed: the
// same event delivered again, here published twice, is dropped.
func ExampleNewConsumer() {
	ctx := context.Background()
	db, _ := testbed.ExampleDB("consumer")
	topic := testbed.ExampleTopic("orders")

	outcomes := make(chan txmsg.Outcome, 8)
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Hooks: txmsg.Hooks{outcomeHook(outcomes)}})
	if err != nil {
		panic(err)
	}
	if err := inbox.Migrate(ctx); err != nil { // or apply txmsg/inbox.sql
		panic(err)
	}
	c, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[orderCreated]{Name: topic},
		func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[orderCreated]) error {
			fmt.Printf("handling order %d, delivery %d\n", d.Event.OrderID, d.Attempt)
			return nil // writes through tx commit with the inbox row
		})}, txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.ExampleName("inventory"),
	})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer c.Close(ctx)

	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: testbed.ExampleName("publisher")})
	if err != nil {
		panic(err)
	}
	if err := pub.Start(ctx); err != nil {
		panic(err)
	}
	defer pub.Close(ctx)
	msg := &txmsg.Message{ID: txmsg.NewID(), Topic: topic, Body: []byte(`{"order_id":42}`)}
	for range 2 {
		if err := pub.Publish(ctx, msg.Clone()); err != nil {
			panic(err)
		}
		fmt.Println(receive(outcomes))
	}
	// Output:
	// handling order 42, delivery 1
	// handled <nil>
	// duplicate <nil>
}

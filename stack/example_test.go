package stack_test

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/stack"
	"github.com/txmsg/txmsg/txmsg"
)

// The examples reach the test bed through testbed's example helpers; see
// main_test.go.

// OrderCreated is the event of the examples.
type OrderCreated struct {
	OrderID int64 `json:"order_id"`
}

// Order is the business row of the examples.
type Order struct {
	ID int64 `gorm:"primaryKey;autoIncrement:false"`
}

// placeOrder is business code: it knows a txmsg.Transactor, not the mode.
func placeOrder(ctx context.Context, tr txmsg.Transactor, topic string, id int64) (*txmsg.Receipt, error) {
	orders, err := txmsg.NewProducer(tr, txmsg.Topic[OrderCreated]{Name: topic})
	if err != nil {
		return nil, err
	}
	return orders.Send(ctx, OrderCreated{OrderID: id}, func(ctx context.Context, tx *gorm.DB) error {
		return tx.Create(&Order{ID: id}).Error
	})
}

// Transactional mode in one value: the barrier table, the transactional
// producer, and the sweeper with its publisher in the group
// "<producer group>-sweeper".
func ExampleTransactional() {
	ctx := context.Background()
	db, topic, group := exampleBed("transactional") // the service's database, topic and producer group

	st, err := stack.Transactional(db, stack.TransactionalConfig{Config: stack.Config{
		RocketMQ: txrmq.Conn{NameServers: nameServers()},
		Group:    group,
		Topics:   []string{topic},
	}})
	if err != nil {
		panic(err)
	}
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	if err := st.Start(ctx); err != nil {
		panic(err)
	}
	defer st.Close(ctx)
	fmt.Println(st.Mode(), st.Health(ctx))

	receipt, err := placeOrder(ctx, st, topic, 42)
	fmt.Println(receipt.State, err)
	state, err := st.Checker().Lookup(ctx, receipt.ID)
	fmt.Println("barrier:", state, err)
	// Output:
	// transactional <nil>
	// committed <nil>
	// barrier: committed <nil>
}

// Local-table mode in one value: the outbox table, and relays publishing it
// through a publisher in the producer group. Only the constructor differs
// from transactional mode.
func ExampleOutbox() {
	ctx := context.Background()
	db, topic, group := exampleBed("outbox")

	st, err := stack.Outbox(db, stack.OutboxConfig{
		Config: stack.Config{
			RocketMQ: txrmq.Conn{NameServers: nameServers()},
			Group:    group,
			Topics:   []string{topic},
		},
		Relay: outbox.RelayConfig{Ordered: true}, // rows of one sharding key in commit order
	})
	if err != nil {
		panic(err)
	}
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	if err := st.Start(ctx); err != nil {
		panic(err)
	}
	defer st.Close(ctx)
	fmt.Println(st.Mode(), len(st.Relays()), st.Health(ctx))

	receipt, err := placeOrder(ctx, st, topic, 42)
	fmt.Println(receipt.State, err)
	stats, err := waitSent(ctx, st.Outbox(), 1)
	fmt.Printf("sent %d, pending %d, %v\n", stats.Sent, stats.Pending, err)
	// Output:
	// outbox 1 <nil>
	// committed <nil>
	// sent 1, pending 0, <nil>
}

// A service that runs its producers in its web processes and its relays in
// a worker process builds the same stack in both, with different Parts.
func ExampleConfig_parts() {
	ctx := context.Background()
	db, topic, group := exampleBed("parts")
	rmq := txrmq.Conn{NameServers: nameServers()}

	// In each web process: only the Transactor, which needs no broker here.
	web, err := stack.Outbox(db, stack.OutboxConfig{Config: stack.Config{Parts: stack.PartProducer}})
	if err != nil {
		panic(err)
	}
	// In the worker process: only the relays and their publisher.
	worker, err := stack.Outbox(db, stack.OutboxConfig{Config: stack.Config{RocketMQ: rmq, Group: group, Topics: []string{topic}, Parts: stack.PartBackground}})
	if err != nil {
		panic(err)
	}
	if err := web.Migrate(ctx); err != nil {
		panic(err)
	}
	for _, st := range []*stack.Stack{web, worker} {
		if err := st.Start(ctx); err != nil {
			panic(err)
		}
		defer st.Close(ctx)
	}
	receipt, err := placeOrder(ctx, web, topic, 42)
	fmt.Println(receipt.State, err)
	_, err = placeOrder(ctx, worker, topic, 43)
	fmt.Println(err)
	stats, err := waitSent(ctx, worker.Outbox(), 1)
	fmt.Printf("sent %d, pending %d, %v\n", stats.Sent, stats.Pending, err)
	// Output:
	// committed <nil>
	// stack: this stack does not run PartProducer
	// sent 1, pending 0, <nil>
}

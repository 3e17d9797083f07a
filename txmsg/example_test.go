package txmsg_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// OrderCreated is the event of these examples.
type OrderCreated struct {
	OrderID int64  `json:"order_id"`
	SKU     string `json:"sku"`
}

// printingTransactor stands in for a real Transactor (a *stack.Stack, an
// *outbox.Outbox or a *txrmq.Transactional): it runs nothing and prints
// the message it would send.
type printingTransactor struct{}

func (printingTransactor) Transact(_ context.Context, msg *txmsg.Message, _ txmsg.LocalTx) (*txmsg.Receipt, error) {
	fmt.Printf("send %s tag=%s key=%s body=%s\n", msg.Topic, msg.Tag, msg.ShardingKey, msg.Body)
	return &txmsg.Receipt{ID: msg.ID, State: txmsg.StateCommitted}, nil
}

// A Producer turns typed events into messages. Message builds the envelope
// without sending it, for code that holds its own transaction (see
// outbox.Outbox.EnqueueTx); Send builds it and hands it to the Transactor.
func ExampleProducer_Message() {
	orders, err := txmsg.NewProducer(printingTransactor{}, txmsg.Topic[OrderCreated]{Name: "order-created", Tag: "created"})
	if err != nil {
		panic(err)
	}
	msg, err := orders.Message(OrderCreated{OrderID: 42, SKU: "A-1"},
		txmsg.WithShardingKey("customer-7"), txmsg.WithKeys("order-42"), txmsg.WithProperty("source", "web"))
	if err != nil {
		panic(err)
	}
	fmt.Println(msg.Topic, msg.Tag, msg.ShardingKey, msg.Keys, msg.Properties["source"])
	fmt.Println(string(msg.Body))
	fmt.Printf("ID assigned by Transact: %t\n", msg.ID == "")

	_, err = orders.Send(context.Background(), OrderCreated{OrderID: 43, SKU: "B-2"},
		func(ctx context.Context, tx *gorm.DB) error { return nil }, // the order's writes, in a real service
		txmsg.WithShardingKey("customer-8"), txmsg.WithTag("priority"))
	if err != nil {
		panic(err)
	}
	// Output:
	// order-created created customer-7 [order-42] web
	// {"order_id":42,"sku":"A-1"}
	// ID assigned by Transact: true
	// send order-created tag=priority key=customer-8 body={"order_id":43,"sku":"B-2"}
}

// JSONCodec is the default codec. A body it cannot decode wraps ErrDecode;
// consumers park such messages instead of retrying them.
func ExampleJSONCodec() {
	var codec txmsg.JSONCodec[OrderCreated]
	body, err := codec.Encode(OrderCreated{OrderID: 42, SKU: "A-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))

	// A producer may add fields before consumers know them.
	event, err := codec.Decode([]byte(`{"order_id":42,"sku":"A-1","coupon":"X"}`))
	fmt.Println(event, err)

	// Strict refuses them.
	_, err = txmsg.JSONCodec[OrderCreated]{Strict: true}.Decode([]byte(`{"order_id":42,"coupon":"X"}`))
	fmt.Println(errors.Is(err, txmsg.ErrDecode))

	_, err = codec.Decode([]byte(`not json`))
	fmt.Println(errors.Is(err, txmsg.ErrDecode))
	// Output:
	// {"order_id":42,"sku":"A-1"}
	// {42 A-1} <nil>
	// true
	// true
}

// Validate applies the broker's rules before anything is written or sent;
// Transact and Publish call it for you. Its errors wrap ErrInvalidMessage
// and, where they apply, ErrInvalidTopic or ErrBodyTooLarge.
func ExampleMessage_Validate() {
	msgs := []*txmsg.Message{
		{Topic: "order-created", Body: []byte(`{}`)},
		{Topic: "order created"},
		{Topic: "%DLQ%orders"},
		{Topic: "order-created", Body: make([]byte, 2048)},
		{Topic: "order-created", Tag: "a||b"},
		{Topic: "order-created", Properties: map[string]string{"KEYS": "x"}},
	}
	for _, m := range msgs {
		err := m.Validate(1024) // the broker's maxMessageSize; 0 means 4 MiB
		fmt.Printf("invalid=%t topic=%t size=%t\n",
			errors.Is(err, txmsg.ErrInvalidMessage), errors.Is(err, txmsg.ErrInvalidTopic), errors.Is(err, txmsg.ErrBodyTooLarge))
	}
	// Output:
	// invalid=false topic=false size=false
	// invalid=true topic=true size=false
	// invalid=true topic=true size=false
	// invalid=true topic=false size=true
	// invalid=true topic=false size=false
	// invalid=true topic=false size=false
}

// Handle binds a typed handler to a topic. A consumer (txrmq.NewConsumer)
// takes the routes and runs each message's handler in a database
// transaction that also records the message in the inbox, so its writes
// commit once per consumer group.
func ExampleHandle() {
	orders := txmsg.Topic[OrderCreated]{Name: "order-created"}
	route := txmsg.Handle(orders, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[OrderCreated]) error {
		// Writes through tx commit with the inbox row, or not at all.
		return tx.Exec("UPDATE stock SET n = n - 1 WHERE sku = ?", d.Event.SKU).Error
	}, txmsg.WithTags("created || paid"))
	fmt.Println(route.Topic(), route.Tags(), route.Validate())

	broken := txmsg.Handle[OrderCreated](orders, nil)
	fmt.Println(errors.Is(broken.Validate(), txmsg.ErrInvalidConfig))
	// Output:
	// order-created created || paid <nil>
	// true
}

// NewID returns UUIDv7s: they sort by creation time, and within one
// process each is greater than the one before, even within a millisecond.
func ExampleNewID() {
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = txmsg.NewID()
	}
	fmt.Println(len(ids[0]), ids[0][14:15]) // canonical form, version 7
	fmt.Println(slices.IsSorted(ids), len(slices.Compact(slices.Clone(ids))))
	// Output:
	// 36 7
	// true 1000
}

// tracer is a hook: it implements HookBeforeSend and HookLocalDone, and
// components skip it for the other events.
type tracer struct{ log *strings.Builder }

func (t tracer) BeforeSend(_ context.Context, msg *txmsg.Message) {
	if msg.Properties == nil {
		msg.Properties = map[string]string{}
	}
	msg.Properties["trace_id"] = "4bf92f35"
}

func (t tracer) OnLocalDone(_ context.Context, msg *txmsg.Message, state txmsg.LocalState, err error, _ time.Duration) {
	fmt.Fprintf(t.log, "local transaction of %s: %s (%v)\n", msg.Topic, state, err)
}

// Hooks observe components' events. A component takes them in its config
// (stack.Config.Hooks, outbox.Config.Hooks, txrmq.TransactionalConfig.Hooks,
// txmsg.InboxConfig.Hooks) and calls, for each event, the hooks that
// implement that event's interface. Here the dispatch functions of package
// txmsg/driver are called directly, as a Transactor calls them.
func ExampleHooks() {
	var log strings.Builder
	hooks := txmsg.Hooks{tracer{&log}}
	ctx := context.Background()
	msg := &txmsg.Message{Topic: "order-created"}

	driver.BeforeSend(hooks, ctx, msg) // before validation, so hooks may add properties
	driver.LocalDone(hooks, ctx, msg, txmsg.StateRolledBack, errors.New("out of stock"), time.Millisecond)
	driver.RelayBatch(hooks, ctx, "relay-1", "txmsg_outbox", 10, 0, time.Millisecond) // tracer does not implement HookRelayBatch

	fmt.Println(msg.Properties["trace_id"])
	fmt.Print(log.String())
	// Output:
	// 4bf92f35
	// local transaction of order-created: rolled_back (out of stock)
}

// WithDelay sends an event later, and only if the transaction commits: the
// reminder goes out 30 minutes after the order is written. Both modes
// honour it (see WithDelay); a delay that is not positive, or beyond
// MaxDelay, fails before anything is written.
func ExampleWithDelay() {
	reminders, err := txmsg.NewProducer(printingTransactor{}, txmsg.Topic[OrderCreated]{Name: "order-reminder"})
	if err != nil {
		panic(err)
	}
	msg, err := reminders.Message(OrderCreated{OrderID: 42, SKU: "A-1"}, txmsg.WithDelay(30*time.Minute))
	if err != nil {
		panic(err)
	}
	fmt.Println(msg.Topic, msg.Delay)
	due, delayed, err := msg.Due(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	fmt.Println(due.Format(time.Kitchen), delayed, err)

	_, err = reminders.Send(context.Background(), OrderCreated{OrderID: 43}, nil, txmsg.WithDelay(0))
	fmt.Println(errors.Is(err, txmsg.ErrInvalidMessage))
	tooFar, _ := reminders.Message(OrderCreated{OrderID: 44}, txmsg.WithDelay(txmsg.MaxDelay+time.Hour))
	_, _, err = tooFar.Due(time.Now())
	fmt.Println(errors.Is(err, txmsg.ErrInvalidMessage))
	// Output:
	// order-reminder 30m0s
	// 12:30PM true <nil>
	// true
	// true
}

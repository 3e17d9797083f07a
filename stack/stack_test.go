package stack

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/fleet"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// offlineDB is a gorm handle that never connects: enough to build a stack.
func offlineDB(t *testing.T) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(gmysql.New(gmysql.Config{
		DSN:                       "txmsg:txmsg@tcp(127.0.0.1:1)/none?parseTime=true",
		SkipInitializeWithVersion: true,
	}), &gorm.Config{DisableAutomaticPing: true, Logger: logger.Discard})
	require.NoError(t, err)
	return db
}

type noopHook struct{}

func (noopHook) BeforeSend(context.Context, *txmsg.Message) {}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := offlineDB(t)
	rmq := txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}
	base := Config{RocketMQ: rmq, Group: "orders"}
	withRMQ := func(f func(*txrmq.Conn)) Config {
		c := base
		f(&c.RocketMQ)
		return c
	}
	_, err := Transactional(nil, TransactionalConfig{Config: base})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "db is nil")
	_, err = Outbox(nil, OutboxConfig{Config: base})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "db is nil")
	txCases := map[string]struct {
		cfg  TransactionalConfig
		want string
	}{
		"bad parts":              {TransactionalConfig{Config: Config{RocketMQ: rmq, Group: "orders", Parts: 4}}, "Parts 4"},
		"bad topic":              {TransactionalConfig{Config: Config{RocketMQ: rmq, Group: "orders", Topics: []string{"a b"}}}, `topic "a b"`},
		"hooks in producer":      {TransactionalConfig{Config: base, Producer: txrmq.TransactionalConfig{Hooks: txmsg.Hooks{noopHook{}}}}, "Producer.Conn, Group, Hooks, Topics and Heartbeat"},
		"no name servers":        {TransactionalConfig{Config: withRMQ(func(c *txrmq.Conn) { c.NameServers = nil })}, "NameServers is empty"},
		"no group":               {TransactionalConfig{Config: Config{RocketMQ: rmq}}, "Group"},
		"sweeper group shared":   {TransactionalConfig{Config: base, Sweeper: txrmq.SweeperConfig{Group: "orders"}}, "is the producer group"},
		"sweeper client set":     {TransactionalConfig{Config: base, Sweeper: txrmq.SweeperConfig{Conn: txrmq.Conn{Namespace: "x"}}}, "Sweeper.Conn"},
		"producer topics set":    {TransactionalConfig{Config: base, Producer: txrmq.TransactionalConfig{Topics: []string{"t"}}}, "Producer.Conn, Group, Hooks, Topics and Heartbeat"},
		"bad checker":            {TransactionalConfig{Config: base, Checker: checker.Config{CheckWindow: -1}}, "CheckWindow"},
		"bad sweeper hold":       {TransactionalConfig{Config: base, Sweeper: txrmq.SweeperConfig{HoldFor: -time.Second}}, "HoldFor"},
		"cache beyond window":    {TransactionalConfig{Config: base, Producer: txrmq.TransactionalConfig{CheckBackCacheAge: 24 * time.Hour}}, "CheckBackCacheAge"},
		"negative workers":       {TransactionalConfig{Config: base, Producer: txrmq.TransactionalConfig{CheckBackWorkers: -1}}, "CheckBackWorkers"},
		"heartbeat in forwarder": {TransactionalConfig{Config: base, Forwarder: txrmq.ForwarderConfig{Heartbeat: fleet.Config{Interval: time.Second}}}, "Forwarder.Conn, DB and Heartbeat"},
		"heartbeat in sweeper":   {TransactionalConfig{Config: base, Sweeper: txrmq.SweeperConfig{Heartbeat: fleet.Config{Interval: time.Second}}}, "Sweeper.Conn, Hooks, ProducerGroups and Heartbeat"},
	}
	for name, c := range txCases {
		t.Run("transactional/"+name, func(t *testing.T) {
			_, err := Transactional(db, c.cfg)
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
		})
	}
	obCases := map[string]struct {
		cfg  OutboxConfig
		want string
	}{
		"hooks in relay":      {OutboxConfig{Config: base, Relay: outbox.RelayConfig{Hooks: txmsg.Hooks{noopHook{}}}}, "set Hooks on stack.Config"},
		"negative relays":     {OutboxConfig{Config: base, Relays: -1}, "Relays -1 must be positive"},
		"bad table":           {OutboxConfig{Config: base, Outbox: outbox.Config{Table: "x;y"}}, "plain SQL identifier"},
		"bad relay":           {OutboxConfig{Config: base, Relay: outbox.RelayConfig{BatchSize: -1}}, "BatchSize"},
		"publisher topics":    {OutboxConfig{Config: base, Publisher: txrmq.PublisherConfig{Topics: []string{"t"}}}, "Publisher.Conn, Group, Hooks and Topics"},
		"no name servers":     {OutboxConfig{Config: withRMQ(func(c *txrmq.Conn) { c.NameServers = nil })}, "NameServers is empty"},
		"bad publisher batch": {OutboxConfig{Config: base, Publisher: txrmq.PublisherConfig{MaxBatch: -1}}, "MaxBatch"},
	}
	for name, c := range obCases {
		t.Run("outbox/"+name, func(t *testing.T) {
			_, err := Outbox(db, c.cfg)
			require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// WithDefaults then Validate accepts a minimal config; Validate alone
// refuses the zero config and names the field.
func TestConfigDefaultsThenValidate(t *testing.T) {
	t.Parallel()
	rmq := txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}

	require.NoError(t, Config{}.WithDefaults().Validate())
	err := Config{}.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Parts")

	tc := TransactionalConfig{Config: Config{RocketMQ: rmq, Group: "orders"}}
	require.NoError(t, tc.WithDefaults().Validate())
	require.Equal(t, "orders"+SweeperSuffix, tc.WithDefaults().Sweeper.Group)
	err = tc.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Parts")
	tc.Parts = PartAll
	tc.Logger = slog.Default()
	err = tc.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Heartbeat: txmsg: invalid config: fleet: Table")
	tc.Heartbeat = tc.Heartbeat.WithDefaults()
	err = tc.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "checker: Table")

	oc := OutboxConfig{}
	require.NoError(t, oc.WithDefaults().Validate())
	require.Equal(t, 1, oc.WithDefaults().Relays)
	err = oc.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Parts")
	oc.Config = oc.Config.WithDefaults()
	err = oc.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Relays")
}

// A transactional stack's sweeper gets a group of its own, derived from the
// producer group, unless one is given.
func TestSweeperGroup(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t) // NewTransactional asks the database who it is
	cfg := TransactionalConfig{Config: Config{RocketMQ: txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}, Group: "orders"}}
	s, err := Transactional(db, cfg)
	require.NoError(t, err)
	require.Equal(t, "orders"+SweeperSuffix, s.sweeperGroup)
	require.NotNil(t, s.Sweeper())
	require.NotNil(t, s.Forwarder())
	require.Equal(t, "orders"+ForwarderSuffix, cfg.WithDefaults().Forwarder.Group)
	require.NotNil(t, s.Publisher())
	require.NoError(t, s.Close(context.Background()))

	cfg.Sweeper.Group = "orders-janitor"
	s, err = Transactional(db, cfg)
	require.NoError(t, err)
	require.Equal(t, "orders-janitor", s.sweeperGroup)
	require.NoError(t, s.Close(context.Background()))

	cfg.Parts = PartProducer
	s, err = Transactional(db, cfg)
	require.NoError(t, err)
	require.Nil(t, s.Sweeper())
	require.Nil(t, s.Forwarder())
	require.Nil(t, s.Publisher())
	require.NotNil(t, s.Transactional())
	require.NoError(t, s.Close(context.Background()))
}

// A local-table stack that runs only the producer needs no broker.
func TestOutboxProducerNeedsNoBroker(t *testing.T) {
	t.Parallel()
	s, err := Outbox(offlineDB(t), OutboxConfig{Config: Config{Parts: PartProducer}})
	require.NoError(t, err)
	require.NotNil(t, s.Outbox())
	require.Nil(t, s.Publisher())
	require.Nil(t, s.Relays())
	_, err = s.Transact(context.Background(), &txmsg.Message{Topic: "t"}, func(context.Context, *gorm.DB) error { return nil })
	require.ErrorContains(t, err, "not started")
}

// order is the business row of the tests.
type order struct {
	ID    int64  `gorm:"primaryKey;autoIncrement"`
	MsgID string `gorm:"size:64;uniqueIndex"`
}

func insertOrder(id *string) txmsg.LocalTx {
	return func(ctx context.Context, tx *gorm.DB) error {
		return tx.Create(&order{MsgID: *id}).Error
	}
}

func countOrders(t *testing.T, db *gorm.DB) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Model(&order{}).Count(&n).Error)
	return n
}

// The transactional stack, started, sends an event with its barrier row and
// the order; a rolled-back one leaves nothing; closed, it refuses sends.
func TestTransactionalStack(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	require.NoError(t, db.AutoMigrate(&order{}))
	s, err := Transactional(db, TransactionalConfig{Config: Config{
		RocketMQ:  txrmq.Conn{NameServers: []string{testbed.NameServer()}},
		Group:     testbed.Name(t, "pg"),
		Topics:    []string{topic},
		Heartbeat: fleet.Config{Interval: 200 * time.Millisecond},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := t.Context()
	require.Equal(t, ModeTransactional, s.Mode())
	require.Equal(t, PartAll, s.Parts())
	require.NoError(t, s.Migrate(ctx))
	require.ErrorContains(t, s.Health(ctx), "not started")

	require.NoError(t, s.Start(ctx))
	require.NoError(t, s.Start(ctx), "Start is idempotent")
	require.NoError(t, s.Health(ctx))

	id := txmsg.NewID()
	receipt, err := s.Transact(ctx, &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{"n":1}`)}, insertOrder(&id))
	require.NoError(t, err)
	require.Equal(t, txmsg.StateCommitted, receipt.State)
	state, err := s.Checker().Lookup(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "committed", state)
	obs.DeliveredOnce(t, id)

	failed := txmsg.NewID()
	boom := errors.New("out of stock")
	_, err = s.Transact(ctx, &txmsg.Message{ID: failed, Topic: topic, Body: []byte(`{"n":2}`)}, func(ctx context.Context, tx *gorm.DB) error {
		if err := insertOrder(&failed)(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.EqualValues(t, 1, countOrders(t, db))

	// The producer, the sweeper and the forwarder heartbeat into the
	// instance table, live, with the producer's counts; Close deletes
	// their rows.
	require.Eventually(t, func() bool {
		rows, err := fleet.List(ctx, db, fleet.DefaultTable)
		require.NoError(t, err)
		kinds := map[string]fleet.Instance{}
		for _, r := range rows {
			kinds[r.Kind] = r
		}
		p, sw, fw := kinds[fleet.KindProducer], kinds[fleet.KindSweeper], kinds[fleet.KindForwarder]
		return len(rows) == 3 && p.State == fleet.StateLive && p.Sent == 1 && p.Failed == 1 &&
			sw.State == fleet.StateLive && sw.Name == s.sweeperGroup && fw.State == fleet.StateLive
	}, 30*time.Second, 100*time.Millisecond, "no live producer, sweeper and forwarder rows with the producer's counts")

	require.NoError(t, s.Close(ctx))
	require.NoError(t, s.Close(ctx), "Close is idempotent")
	rows, err := fleet.List(ctx, db, fleet.DefaultTable)
	require.NoError(t, err)
	require.Empty(t, rows, "Close deletes the instances' rows")
	_, err = s.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte(`{}`)}, insertOrder(new(string)))
	require.ErrorIs(t, err, txmsg.ErrClosed)
	require.ErrorIs(t, s.Health(ctx), txmsg.ErrClosed)
	require.ErrorIs(t, s.Start(ctx), txmsg.ErrClosed)
	obs.NeverDelivered(t, failed, 2*time.Second)
}

// A transactional stack runs the forwarder: a delayed event reaches its
// topic when due, not before.
func TestTransactionalStackDelayed(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	db := testbed.DB(t)
	topic, delayTopic := testbed.Topic(t), testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	require.NoError(t, db.AutoMigrate(&order{}))
	s, err := Transactional(db, TransactionalConfig{
		Config: Config{
			RocketMQ:  txrmq.Conn{NameServers: []string{testbed.NameServer()}},
			Group:     testbed.Name(t, "pg"),
			Topics:    []string{topic},
			Heartbeat: fleet.Config{Interval: 200 * time.Millisecond},
		},
		Producer: txrmq.TransactionalConfig{DelayTopic: delayTopic},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := t.Context()
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Start(ctx))
	p, err := txmsg.NewProducer(s, txmsg.Topic[map[string]int]{Name: topic})
	require.NoError(t, err)
	id := txmsg.NewID()
	sent := time.Now()
	_, err = p.Send(ctx, map[string]int{"n": 1}, insertOrder(&id), txmsg.WithID(id), txmsg.WithDelay(2*time.Second))
	require.NoError(t, err)
	obs.NeverDelivered(t, id, 2*time.Second-time.Since(sent)-200*time.Millisecond)
	obs.DeliveredWithin(t, id, 10*time.Second)
	n, _ := s.Forwarder().Forwarded()
	require.EqualValues(t, 1, n)
	require.NoError(t, s.Forwarder().Health(ctx))
	// The forwarder's row in the instance table counts what it sent on.
	require.Eventually(t, func() bool {
		rows, err := fleet.List(ctx, db, fleet.DefaultTable)
		require.NoError(t, err)
		for _, r := range rows {
			if r.Kind == fleet.KindForwarder {
				return r.State == fleet.StateLive && r.Name == s.Forwarder().Group() && r.Sent == 1 && r.Failed == 0
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "no live forwarder row counting the event sent")
}

// The local-table stack writes the row with the order and its relays
// publish it; split into a producer-only and a background-only stack, as
// two processes would run it, it does the same.
func TestOutboxStack(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	obs := testbed.Observe(t, topic, nil)
	require.NoError(t, db.AutoMigrate(&order{}))
	rmq := txrmq.Conn{NameServers: []string{testbed.NameServer()}}
	group := testbed.Name(t, "pg")
	ctx := t.Context()

	t.Run("whole", func(t *testing.T) {
		s, err := Outbox(db, OutboxConfig{
			Config: Config{RocketMQ: rmq, Group: group, Topics: []string{topic}},
			Relays: 2,
			Relay:  outbox.RelayConfig{Name: "r"},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		require.Equal(t, ModeOutbox, s.Mode())
		require.Nil(t, s.Checker())
		require.Len(t, s.Relays(), 2)
		require.Equal(t, "r-1", s.Relays()[0].Name())
		require.Equal(t, "r-2", s.Relays()[1].Name())
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Start(ctx))
		require.NoError(t, s.Health(ctx))
		for _, r := range s.Relays() {
			require.True(t, r.Running())
		}

		id := txmsg.NewID()
		receipt, err := s.Transact(ctx, &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{"n":1}`)}, insertOrder(&id))
		require.NoError(t, err)
		require.Equal(t, txmsg.StateCommitted, receipt.State)
		obs.DeliveredOnce(t, id)

		require.NoError(t, s.Close(ctx))
		for _, r := range s.Relays() {
			require.False(t, r.Running(), "Close returned with relay %s running", r.Name())
		}
		_, err = s.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte(`{}`)}, insertOrder(new(string)))
		require.ErrorIs(t, err, txmsg.ErrClosed)
	})

	t.Run("split", func(t *testing.T) {
		producer, err := Outbox(db, OutboxConfig{Config: Config{Parts: PartProducer}})
		require.NoError(t, err)
		require.NoError(t, producer.Start(ctx))
		t.Cleanup(func() { _ = producer.Close(context.Background()) })
		id := txmsg.NewID()
		_, err = producer.Transact(ctx, &txmsg.Message{ID: id, Topic: topic, Body: []byte(`{"n":1}`)}, insertOrder(&id))
		require.NoError(t, err)
		require.NoError(t, producer.Health(ctx))

		background, err := Outbox(db, OutboxConfig{Config: Config{RocketMQ: rmq, Group: group, Topics: []string{topic}, Parts: PartBackground}})
		require.NoError(t, err)
		_, err = background.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte(`{}`)}, insertOrder(new(string)))
		require.ErrorIs(t, err, ErrNoProducer)
		require.NoError(t, background.Start(ctx))
		t.Cleanup(func() { _ = background.Close(context.Background()) })
		obs.DeliveredOnce(t, id)
		require.Eventually(t, func() bool {
			st, err := background.Outbox().Stats(ctx)
			return err == nil && st.Pending == 0 && st.Sent == 2
		}, time.Minute, 50*time.Millisecond)
		require.NoError(t, background.Health(ctx))
	})
}

// A Start that fails closes what it started and leaves the stack closed.
func TestStartFailureClosesTheStack(t *testing.T) {
	t.Parallel()
	s, err := Transactional(testbed.DB(t), TransactionalConfig{Config: Config{RocketMQ: txrmq.Conn{NameServers: []string{"127.0.0.1:9876"}}, Group: "orders"}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = s.Start(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "start transactional producer")
	_, err = s.Transact(context.Background(), &txmsg.Message{Topic: "t", Body: []byte(`{}`)}, func(context.Context, *gorm.DB) error { return nil })
	require.ErrorIs(t, err, txmsg.ErrClosed)
	require.ErrorIs(t, s.Start(context.Background()), txmsg.ErrClosed)
	require.ErrorIs(t, s.Transactional().Start(context.Background()), txmsg.ErrClosed, "the producer was closed")
	require.NoError(t, s.Close(context.Background()))
}

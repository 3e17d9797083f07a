package txrmq_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestTransactionalHealth checks Health through the producer's life and
// for a topic the name servers do not route.
func TestTransactionalHealth(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	db := testbed.DB(t)
	chk, err := checker.New(db, checker.Config{})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	log := slog.New(slog.DiscardHandler)
	cfg := func(topics ...string) txrmq.TransactionalConfig {
		return txrmq.TransactionalConfig{
			Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}, Group: testbed.Name(t, "pg"),
			Topics: topics,
		}
	}

	topic := testbed.Topic(t)
	tr, err := txrmq.NewTransactional(db, chk, cfg(topic))
	require.NoError(t, err)
	require.ErrorIs(t, tr.Health(ctx), txmsg.ErrNotStarted)
	_, err = tr.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte("{}")}, func(context.Context, *gorm.DB) error { return nil })
	require.ErrorIs(t, err, txmsg.ErrNotStarted)
	require.NoError(t, tr.Start(ctx))
	require.NoError(t, tr.Health(ctx))
	require.NoError(t, tr.Close(ctx))
	require.ErrorIs(t, tr.Health(ctx), txmsg.ErrClosed)

	missing := testbed.Name(t, "never_created")
	tr, err = txrmq.NewTransactional(db, chk, cfg(missing))
	require.NoError(t, err)
	require.NoError(t, tr.Start(ctx))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	err = tr.Health(ctx)
	require.ErrorIs(t, err, txmsg.ErrTopicNotFound)
	require.ErrorContains(t, err, `topic "`+missing+`" does not exist`)
}

// TestPublishBeforeStart: a publisher used before Start refuses with
// ErrNotStarted.
func TestPublishBeforeStart(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	p, err := txrmq.NewPublisher(txrmq.PublisherConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: slog.New(slog.DiscardHandler)}, Group: testbed.Name(t, "pub"),
	})
	require.NoError(t, err)
	err = p.Publish(context.Background(), &txmsg.Message{Topic: "any_topic", Body: []byte("{}")})
	require.ErrorIs(t, err, txmsg.ErrNotStarted)
	require.NoError(t, p.Close(context.Background()))
}

// TestConsumerHealth checks Health through the consumer's life and when
// the inbox table is gone.
func TestConsumerHealth(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	ctx := context.Background()
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	type event struct{}
	c, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[event]{Name: topic}, func(context.Context, *gorm.DB, txmsg.Delivery[event]) error { return nil })}, txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: slog.New(slog.DiscardHandler)}, Group: testbed.Name(t, "cg"),
	})
	require.NoError(t, err)
	require.ErrorIs(t, c.Health(ctx), txmsg.ErrNotStarted)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.Health(ctx))

	require.NoError(t, db.Migrator().DropTable(txmsg.DefaultInboxTable))
	require.ErrorContains(t, c.Health(ctx), txmsg.DefaultInboxTable)
	require.NoError(t, inbox.Migrate(ctx))
	require.NoError(t, c.Health(ctx))

	require.NoError(t, c.Close(ctx))
	require.ErrorIs(t, c.Health(ctx), txmsg.ErrClosed)
}

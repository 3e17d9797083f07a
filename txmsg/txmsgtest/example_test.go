package txmsgtest_test

import (
	"context"
	"os"
	"strings"
	"testing"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/txmsgtest"
)

// testConformance runs both suites: in a _test.go file of the package
// under test it is func TestConformance(t *testing.T). Here the subjects
// are txmsg's own RocketMQ Transactor and Publisher; put yours in their
// place.
func testConformance(t *testing.T) {
	nameServers := []string{os.Getenv("NAMESRV")}
	t.Run("Transactor", func(t *testing.T) {
		txmsgtest.RunTransactor(t, func(t *testing.T) txmsgtest.TransactorEnv {
			db := testDatabase(t)
			topic := testTopic(t)
			chk, err := checker.New(db, checker.Config{})
			must(t, err)
			must(t, chk.Migrate(context.Background()))
			tr, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{
				Conn:   txrmq.Conn{NameServers: nameServers},
				Group:  topic + "_producer",
				Topics: []string{topic},
			})
			must(t, err)
			must(t, tr.Start(context.Background()))
			t.Cleanup(func() { _ = tr.Close(context.Background()) })
			return txmsgtest.TransactorEnv{
				Transactor: tr, DB: db, Topic: topic,
				Observer:        observe(t, nameServers, topic),
				BrokerMessageID: true,
			}
		})
	})
	t.Run("Publisher", func(t *testing.T) {
		txmsgtest.RunPublisher(t, func(t *testing.T) txmsgtest.PublisherEnv {
			topic := testTopic(t)
			start := func(t testing.TB, nameServers []string) txmsg.Publisher {
				p, err := txrmq.NewPublisher(txrmq.PublisherConfig{
					Conn:  txrmq.Conn{NameServers: nameServers},
					Group: topic + "_publisher", MaxBodySize: 5 << 20,
				})
				must(t, err)
				must(t, p.Start(context.Background()))
				t.Cleanup(func() { _ = p.Close(context.Background()) })
				return p
			}
			return txmsgtest.PublisherEnv{
				Publisher: start(t, nameServers),
				Topic:     topic,
				Observer:  observe(t, nameServers, topic),
				// The same Publisher, pointed at a port nobody listens on.
				Unavailable: func(t testing.TB) txmsg.Publisher { return start(t, []string{"127.0.0.1:1"}) },
				// The broker refuses bodies over its maxMessageSize (4 MiB).
				Rejected: func(topic string) *txmsg.Message {
					return &txmsg.Message{Topic: topic, Body: []byte(strings.Repeat("x", 4<<20+1))}
				},
			}
		})
	})
}

// testDatabase creates a database for one case and drops it when t
// ends: the cases run in parallel and count their rows.
func testDatabase(t *testing.T) *gorm.DB {
	cfg, err := gomysql.ParseDSN(os.Getenv("DSN")) // a user that may create databases
	must(t, err)
	server, err := gorm.Open(mysql.Open(cfg.FormatDSN()), &gorm.Config{})
	must(t, err)
	cfg.DBName = "conformance_" + strings.ToLower(txmsg.NewID())
	must(t, server.Exec("CREATE DATABASE `"+cfg.DBName+"`").Error)
	t.Cleanup(func() { server.Exec("DROP DATABASE `" + cfg.DBName + "`") })
	db, err := gorm.Open(mysql.Open(cfg.FormatDSN()), &gorm.Config{})
	must(t, err)
	return db
}

// testTopic returns a topic of the case's own. This one is created by the
// broker on first use (autoCreateTopicEnable=true); on a broker without
// it, create the topic with an admin client here.
func testTopic(t *testing.T) string {
	return "conformance_" + strings.ToLower(txmsg.NewID())
}

// observe records every message of topic that a consumer group of its
// own receives, from the topic's first offset, duplicates included.
func observe(t *testing.T, nameServers []string, topic string) txmsgtest.Observer {
	rec := &txmsgtest.Recorder{}
	c, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(nameServers)),
		consumer.WithGroupName(topic+"_observer"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	must(t, err)
	must(t, c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			rec.Record(&txmsg.Message{
				ID: m.GetProperty(txmsg.PropertyID), Topic: m.Topic, Tag: m.GetTags(), Keys: strings.Fields(m.GetKeys()),
				ShardingKey: m.GetProperty(txmsg.PropertyShardingKey), Body: m.Body, Properties: m.GetProperties(),
			})
		}
		return consumer.ConsumeSuccess, nil
	}))
	must(t, c.Start())
	t.Cleanup(func() { _ = c.Shutdown() })
	return rec
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A package runs the suites on its own Transactor and Publisher from a
// test; testConformance above is that test.
func Example() {
	_ = testConformance
}

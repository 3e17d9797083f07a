package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// secretSink collects every string a test produced: log output and error
// messages.
type secretSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *secretSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *secretSink) add(format string, args ...any) { fmt.Fprintf(s, format+"\n", args...) }

func (s *secretSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestSecretsNeverAppear builds RocketMQ components with ACL credentials
// and txmsgctl runs with a DSN password, drives them into failures (an
// unreachable name server, a wrong password, an unparseable DSN, a
// missing table), and checks that no log line at any level (txmsg's and
// the bridged client's) and no error message carries a secret.
func TestSecretsNeverAppear(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	const (
		accessKey = "AKIDtxmsgRedaction7731"
		secretKey = "sk-txmsg-redaction-Q9bX2mV"
		token     = "sts-token-redaction-55c1"
		password  = "pw-redaction-9f8e7d"
	)
	sink := &secretSink{}
	log := slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t)
	topic := testbed.Topic(t)

	// Configs themselves, however they are printed or logged.
	cfg := txrmq.Conn{NameServers: []string{"127.0.0.1:1"}, AccessKey: accessKey, SecretKey: secretKey,
		SecurityToken: token, Logger: log, ClientLogLevel: slog.LevelDebug}
	txCfg := txrmq.TransactionalConfig{Conn: cfg, Group: testbed.Name(t, "pg"), SendTimeout: 500 * time.Millisecond, Retries: 1, Topics: []string{topic}}
	sink.add("%v %+v %#v %s", cfg, cfg, cfg, cfg)
	sink.add("%v %+v %#v %s", txCfg, txCfg, txCfg, txCfg)
	log.Info("config", "cfg", cfg, "tx", txCfg)
	slog.New(slog.NewTextHandler(sink, nil)).Info("config", "cfg", cfg)

	// A transactional producer and a consumer whose name server is gone.
	chk, err := checker.New(db, checker.Config{Logger: log})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	tr, err := txrmq.NewTransactional(db, chk, txCfg)
	require.NoError(t, err)
	if err := tr.Start(ctx); err != nil {
		sink.add("start: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	_, err = tr.Transact(ctx, &txmsg.Message{Topic: topic, Body: []byte("x")}, func(context.Context, *gorm.DB) error { return nil })
	require.Error(t, err)
	sink.add("transact: %v", err)
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = tr.Health(hctx)
	cancel()
	require.Error(t, err)
	sink.add("health: %v", err)

	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Logger: log})
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(ctx))
	parked := &txmsg.Received{Message: &txmsg.Message{ID: "some-id", Topic: topic, Body: []byte("?")}, Attempt: 1}
	require.NoError(t, driver.Park(inbox, ctx, "g", parked, txmsg.ErrDecode))
	type event struct{}
	cons, err := txrmq.NewConsumer(inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[event]{Name: topic}, func(context.Context, *gorm.DB, txmsg.Delivery[event]) error { return nil })}, txrmq.ConsumerConfig{Conn: cfg, Group: testbed.Name(t, "cg")})
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cons.Start(sctx)
	cancel()
	require.Error(t, err)
	sink.add("consumer start: %v", err)
	_ = cons.Close(context.Background())

	// A publisher that reaches the real broker, signing its requests with
	// the credentials (the test broker does not check them), logging at
	// debug level.
	pcfg := cfg
	pcfg.NameServers = []string{testbed.NameServer()}
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: pcfg, Group: testbed.Name(t, "pub"), SendTimeout: 500 * time.Millisecond, Retries: 1, Topics: []string{topic}})
	require.NoError(t, err)
	require.NoError(t, pub.Start(ctx))
	if err := pub.Publish(ctx, &txmsg.Message{Topic: topic, Body: []byte("signed")}); err != nil {
		sink.add("publish: %v", err)
	}
	_ = pub.Close(ctx)

	// txmsgctl with the password in its DSN.
	base, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	wrong := base.Clone()
	wrong.Passwd = password
	unreachable := wrong.Clone()
	unreachable.Addr = "127.0.0.1:1"
	runs := []result{
		ctl(t, map[string]string{"TXMSG_DSN": wrong.FormatDSN()}, "stats"),
		ctl(t, map[string]string{"TXMSG_DSN": unreachable.FormatDSN()}, "stats"),
		ctl(t, nil, "stats", "-dsn", "txmsg:"+password+"@bogus"),
		ctl(t, nil, "stats", "-dsn", "txmsg:"+password+"@tcp(127.0.0.1:3306)/"),
		ctl(t, nil, "purge", "-v", "-dsn", "txmsg:"+password+"@tcp(127.0.0.1:3306)/x?timeout=notaduration"),
		ctl(t, map[string]string{"TXMSG_DSN": dsn}, "parked", "list", "-kind", "outbox", "-v"),
		ctl(t, map[string]string{"TXMSG_DSN": dsn, "TXMSG_NAMESRV": "127.0.0.1:1", "TXMSG_ACCESS_KEY": accessKey, "TXMSG_SECRET_KEY": secretKey},
			"parked", "requeue", "-kind", "consumer", "-v", "some-id"),
	}
	for i, r := range runs {
		require.NotEqual(t, exitOK, r.code, "run %d must fail: %s", i, r)
		require.NotEmpty(t, r.stderr, "run %d explains its failure", i)
		sink.add("run %d: %s", i, r)
	}
	require.Contains(t, runs[0].stderr, "Access denied")
	require.Contains(t, runs[0].stderr, ":****@tcp(")

	require.Eventually(t, func() bool { return strings.Contains(clientLogs.String(), "rocketmq-client") }, 10*time.Second, 50*time.Millisecond,
		"the client's own logs are captured too")
	all := sink.String() + clientLogs.String()
	for _, secret := range []string{accessKey, secretKey, token, password} {
		require.NotContains(t, all, secret)
	}
	require.Contains(t, all, "acl", "configs are logged, without their credentials")
}

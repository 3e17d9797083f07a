// Command demo runs the order service against the real broker and
// database and checks that nothing was lost or applied twice. `make demo`
// (and `make demo MODE=outbox`) builds the service and runs:
//
//	go run ./examples/orderservice/cmd/demo -service .cache/demo/orderservice -mode transactional
//
// It recreates the database (default txmsg_demo), picks a fresh topic and
// group names, starts the service as a child process, sends about 200
// orders (some over-stock, some invalid), waits for the inventory consumer
// to decide them all, stops the service with SIGTERM and prints a
// consistency report. The exit status is 1 when the report is not
// consistent.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txmsg/txmsg/examples/orderservice/scenario"
)

type options struct {
	service, mode, dsn, dbName, namesrv, broker string
	orders                                      int
	drainTimeout, linger                        time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.service, "service", "", "path to the orderservice binary (required)")
	flag.StringVar(&o.mode, "mode", "transactional", "delivery mode: transactional or outbox")
	flag.StringVar(&o.dsn, "dsn", envOr("TXMSG_DSN", "txmsg:txmsg@tcp(127.0.0.1:13306)/?parseTime=true&loc=UTC&charset=utf8mb4"), "MySQL/MariaDB DSN; its database name is replaced by -db [$TXMSG_DSN]")
	flag.StringVar(&o.dbName, "db", "txmsg_demo", "database to drop and create for the run")
	flag.StringVar(&o.namesrv, "namesrv", envOr("TXMSG_NAMESRV", "127.0.0.1:9876"), "RocketMQ name server [$TXMSG_NAMESRV]")
	flag.StringVar(&o.broker, "broker", envOr("TXMSG_BROKER", "127.0.0.1:10911"), "RocketMQ broker address, to create the run's topic on [$TXMSG_BROKER]")
	flag.IntVar(&o.orders, "orders", 200, "order requests to send")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 60*time.Second, "how long to wait for the consumer to decide every order")
	flag.DurationVar(&o.linger, "linger", 0, "keep the service (and its dashboard) running this long after the report's checks")
	flag.Parse()
	if o.service == "" {
		fmt.Fprintln(os.Stderr, "demo: -service is required (make demo builds it)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	consistent, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if !consistent {
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (bool, error) {
	db, dsn, err := freshDatabase(o.dsn, o.dbName)
	if err != nil {
		return false, err
	}
	addr, err := freePort()
	if err != nil {
		return false, err
	}
	suffix := randomSuffix()
	topic := "order-created-" + suffix
	fmt.Printf("demo: mode %s, database %s, topic %s, service on %s\n", o.mode, o.dbName, topic, addr)

	svc := exec.Command(o.service,
		"-mode", o.mode,
		"-http-addr", addr,
		"-namesrv", o.namesrv,
		"-topic", topic,
		"-producer-group", "orderservice-producer-"+suffix,
		"-consumer-group", "orderservice-inventory-"+suffix,
		"-create-topic-on", o.broker,
		"-log-level", "info",
	)
	// The DSN goes through the environment: it holds a password.
	svc.Env = append(os.Environ(), "ORDERSVC_DSN="+dsn)
	svc.Stdout, svc.Stderr = os.Stderr, os.Stderr
	if err := svc.Start(); err != nil {
		return false, fmt.Errorf("start service: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- svc.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = svc.Process.Kill()
			<-exited
		}
	}()

	base := "http://" + addr
	fmt.Println("demo: waiting for the service to start")
	if err := waitReady(ctx, base, exited); err != nil {
		return false, err
	}
	fmt.Printf("demo: txmsg dashboard on %s/dashboard/ while the service runs (read-only)\n", base)
	fmt.Printf("demo: sending %d orders\n", o.orders)
	res, err := scenario.Drive(ctx, scenario.Options{BaseURL: base, Orders: o.orders, Progress: os.Stdout})
	if err != nil {
		return false, err
	}
	rep, err := scenario.Audit(ctx, db, res, o.drainTimeout, os.Stdout)
	if err != nil {
		return false, err
	}

	if o.linger > 0 {
		fmt.Printf("demo: the service keeps running for %s; the dashboard is on %s/dashboard/\n", o.linger, base)
		select {
		case <-ctx.Done():
		case <-time.After(o.linger):
		case err := <-exited:
			stopped = true
			return false, fmt.Errorf("the service exited: %v", err)
		}
	}
	fmt.Println("demo: stopping the service (SIGTERM)")
	stopped = true
	if err := stopService(svc, exited); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	fmt.Println()
	rep.Print(os.Stdout)
	return rep.Consistent(), nil
}

// freshDatabase drops and creates dbName on the server of dsn and returns
// a handle on it and its DSN.
func freshDatabase(dsn, dbName string) (*gorm.DB, string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, "", errors.New("-dsn is not a valid MySQL DSN")
	}
	cfg.ParseTime = true
	cfg.DBName = ""
	server, err := open(cfg.FormatDSN())
	if err != nil {
		return nil, "", fmt.Errorf("connect to MySQL/MariaDB at %s (scripts/mysql.sh start): %w", cfg.Addr, err)
	}
	defer closeDB(server)
	for _, stmt := range []string{
		"DROP DATABASE IF EXISTS `" + dbName + "`",
		"CREATE DATABASE `" + dbName + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
	} {
		if err := server.Exec(stmt).Error; err != nil {
			return nil, "", fmt.Errorf("recreate database %s: %w", dbName, err)
		}
	}
	cfg.DBName = dbName
	db, err := open(cfg.FormatDSN())
	if err != nil {
		return nil, "", err
	}
	return db, cfg.FormatDSN(), nil
}

func open(dsn string) (*gorm.DB, error) {
	return gorm.Open(gmysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// waitReady polls GET /healthz until it answers 200, the service exits or
// a minute passes.
func waitReady(ctx context.Context, base string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the service exited during startup: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("the service did not become ready: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopService sends SIGTERM and expects a clean exit within 30 s.
func stopService(svc *exec.Cmd, exited <-chan error) error {
	if err := svc.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal the service: %w", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("the service did not shut down cleanly: %v", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = svc.Process.Kill()
		<-exited
		return errors.New("the service did not stop within 30 s of SIGTERM")
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

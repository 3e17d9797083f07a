package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
)

// childEnv carries a child's spec (JSON); its presence makes the program a
// child. The test binary's TestMain honours it too.
const childEnv = "TXCHAOS_CHILD"

// Lines a child writes to stderr for the supervisor.
const (
	lineReady     = "TXCHAOS-READY"
	lineKillPoint = "TXCHAOS-KILL-POINT"
	lineCheckBack = "TXCHAOS-CHECKBACK"
)

// Roles.
const (
	roleProducer = "producer"
	roleRelay    = "relay"
	roleConsumer = "consumer"
	roleSweeper  = "sweeper"
)

// childSpec is everything a child process needs.
type childSpec struct {
	Role        string `json:"role"`
	Mode        string `json:"mode,omitempty"` // producer: tx or outbox
	Name        string `json:"name"`
	Incarnation int    `json:"incarnation"`

	DSN        string            `json:"dsn"`
	NameServer string            `json:"namesrv"`
	Topics     map[string]string `json:"topics"` // mode → topic

	// TxGroup is the transactional producer group; the sweeper's group is
	// derived from it (stack.SweeperSuffix).
	TxGroup       string `json:"tx_group"`
	RelayGroup    string `json:"relay_group"`
	ConsumerGroup string `json:"consumer_group"`
	// OrderedGroup is the group of the ordered consumer of the outbox
	// topic; ConsumerGroup's concurrent consumer reads the tx topic.
	OrderedGroup string `json:"ordered_group"`

	StableName    bool    `json:"stable_name,omitempty"` // relay: keep Name across restarts
	AttemptDir    string  `json:"attempt_dir"`
	Workers       int     `json:"workers"`
	Keys          int     `json:"keys"`
	Rate          float64 `json:"rate"`
	RollbackRatio float64 `json:"rollback_ratio"`
	// DelayRatio is the share of a producer's transactions sent with a
	// delay; DelayTopic is the transactional mode's delay topic, which the
	// producer sends to and the sweeper's process forwards from.
	DelayRatio float64 `json:"delay_ratio"`
	DelayTopic string  `json:"delay_topic"`
	// Reconcile turns stack.Config.Reconcile on in every stack: the
	// producers keep each event's message, the sweeper's and the relays'
	// processes run a reconciler (the HA form, where failovers lose
	// acknowledged messages).
	Reconcile bool `json:"reconcile,omitempty"`
}

func childMain(raw string) int {
	// First: until signal.Notify runs, SIGUSR1 and SIGUSR2 would kill the
	// process, and the supervisor arms kill points with them.
	ks := newKillSwitch()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		log.Error("bad child spec", "err", err)
		return 2
	}
	log = log.With("proc", spec.Name, "incarnation", spec.Incarnation)
	testbed.QuietClientLogs()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch spec.Role {
	case roleProducer:
		err = runProducer(ctx, spec, ks, log)
	case roleRelay:
		err = runRelay(ctx, spec, ks, log)
	case roleConsumer:
		err = runConsumer(ctx, spec, ks, log)
	case roleSweeper:
		err = runSweeper(ctx, spec, log)
	default:
		err = fmt.Errorf("unknown role %q", spec.Role)
	}
	if err != nil {
		log.Error("child failed", "err", err)
		return 1
	}
	return 0
}

// ready tells the supervisor the child has started its components; kill
// points are armed only after it.
func ready() { fmt.Fprintln(os.Stderr, lineReady) }

// killSwitch holds two kill points a component's hooks pass through. The
// supervisor arms point 0 with SIGUSR1 and point 1 with SIGUSR2; the next
// pass through an armed point SIGKILLs the process on the spot.
type killSwitch struct {
	armed [2]atomic.Bool
}

func newKillSwitch() *killSwitch {
	k := &killSwitch{}
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for s := range ch {
			if s == syscall.SIGUSR1 {
				k.armed[0].Store(true)
			} else {
				k.armed[1].Store(true)
			}
		}
	}()
	return k
}

// at kills the process when point p is armed.
func (k *killSwitch) at(p int, name, detail string) {
	if k == nil || !k.armed[p].CompareAndSwap(true, false) {
		return
	}
	fmt.Fprintln(os.Stderr, lineKillPoint, name, detail)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute) // never returns: the signal is on its way
}

// openDB opens the run's database with a pool of size connections and
// timeouts that turn a database outage into errors rather than hangs.
func openDB(dsn string, size int) (*gorm.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 3 * time.Second
	cfg.ReadTimeout = 30 * time.Second
	cfg.WriteTimeout = 30 * time.Second
	db, err := testbed.Open(cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(size)
	sqlDB.SetMaxIdleConns(size)
	sqlDB.SetConnMaxLifetime(time.Minute)
	return db, nil
}

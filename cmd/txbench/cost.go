package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

// The COST phase counts, on the wire between the benchmark and the
// database, what each kind of event costs: the client commands by kind
// (COM_QUERY and COM_STMT_PREPARE by SQL verb and table, COM_STMT_EXECUTE,
// COM_STMT_CLOSE), the round trips (a write followed by a read on one
// connection) and the bytes each way. The events run one at a time, so the
// counts are exact; nothing is timed.

// wireNet is the network name the counting dialer is registered under.
const wireNet = "txbench_count"

var wire = &wireCounter{}

var registerWireNet = sync.OnceFunc(func() {
	registerWrappedNet(wireNet, func(c net.Conn) net.Conn { return &countingConn{Conn: c, w: wire} })
})

// registerWrappedNet registers, for the MySQL driver, a network name whose
// connections are TCP connections wrapped by wrap.
func registerWrappedNet(name string, wrap func(net.Conn) net.Conn) {
	mysql.RegisterDialContext(name, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	})
}

// wireCounter totals what every counting connection sent and received.
type wireCounter struct {
	mu         sync.Mutex
	cmds       map[string]int64
	roundTrips int64
	out, in    int64
}

func (w *wireCounter) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cmds, w.roundTrips, w.out, w.in = map[string]int64{}, 0, 0, 0
}

type wireSnapshot struct {
	cmds                map[string]int64
	roundTrips, out, in int64
}

func (w *wireCounter) snapshot() wireSnapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := wireSnapshot{cmds: map[string]int64{}, roundTrips: w.roundTrips, out: w.out, in: w.in}
	for k, v := range w.cmds {
		s.cmds[k] = v
	}
	return s
}

// countingConn counts one database connection's traffic. database/sql
// uses a connection from one goroutine at a time, so wrote needs no lock.
type countingConn struct {
	net.Conn
	w     *wireCounter
	wrote bool
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.w.mu.Lock()
	c.w.out += int64(n)
	// A client command is a packet with sequence number 0: 3 bytes of
	// length, the sequence byte, then the command byte.
	if len(b) >= 5 && b[3] == 0 && c.w.cmds != nil {
		c.w.cmds[classify(b[4], b[5:])]++
	}
	c.w.mu.Unlock()
	c.wrote = true
	return n, err
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.w.mu.Lock()
	c.w.in += int64(n)
	if c.wrote {
		c.w.roundTrips++
	}
	c.w.mu.Unlock()
	c.wrote = false
	return n, err
}

// classify names a client command: "query INSERT orders", "prepare SELECT
// txmsg_barrier", "execute", "close".
func classify(cmd byte, payload []byte) string {
	switch cmd {
	case 0x03:
		return "query " + sqlShape(string(payload))
	case 0x16:
		return "prepare " + sqlShape(string(payload))
	case 0x17:
		return "execute"
	case 0x19:
		return "close"
	case 0x0e:
		return "ping"
	case 0x1f:
		return "reset"
	}
	return fmt.Sprintf("command 0x%02x", cmd)
}

// sqlShape is a statement's verb and the table it works on.
func sqlShape(q string) string {
	f := strings.Fields(strings.NewReplacer("`", " ", "(", " ", ",", " ").Replace(q))
	if len(f) == 0 {
		return "?"
	}
	verb := strings.ToUpper(f[0])
	after := ""
	switch verb {
	case "INSERT", "REPLACE", "DELETE":
		after = "INTO"
		if verb == "DELETE" {
			after = "FROM"
		}
	case "SELECT":
		after = "FROM"
	case "UPDATE":
		if len(f) > 1 {
			return verb + " " + f[1]
		}
	default:
		return strings.Join(f[:min(2, len(f))], " ")
	}
	for i, w := range f {
		if strings.EqualFold(w, after) && i+1 < len(f) {
			return verb + " " + f[i+1]
		}
	}
	return verb
}

// costCase is one kind of event the phase counts.
type costCase struct {
	name string
	run  func(ctx context.Context, seq int64) error
}

// costEvents is how many events of each case the phase counts.
const costEvents = 200

// runCost counts each case's wire traffic per event, with the caller's DSN
// options and again with interpolateParams=true (the driver then sends
// each statement as text, without a prepare, execute and close).
func (b *bench) runCost(ctx context.Context) error {
	sizes, err := b.rowSizes(ctx)
	if err != nil {
		return err
	}
	b.res.extra["bytes_per_row"] = sizes
	out := map[string]any{}
	for _, interpolate := range []bool{false, true} {
		cfg, err := mysql.ParseDSN(b.env.dsn)
		if err != nil {
			return err
		}
		registerWireNet()
		cfg.Net = wireNet
		cfg.InterpolateParams = interpolate
		db, err := openPool(cfg.FormatDSN(), 8)
		if err != nil {
			return err
		}
		res, err := b.costCases(ctx, db)
		if s, e := db.DB(); e == nil {
			_ = s.Close()
		}
		if err != nil {
			return err
		}
		key := "default_dsn"
		if interpolate {
			key = "interpolate_params"
		}
		out[key] = res
	}
	b.res.extra["cost_per_event"] = out
	return nil
}

func (b *bench) costCases(ctx context.Context, db *gorm.DB) (map[string]any, error) {
	if err := b.realisticTables(ctx); err != nil {
		return nil, err
	}
	topic, err := b.env.topic(ctx, "cost"+txmsg.NewID()[28:])
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(db, outbox.Config{Table: "outbox_cost", Logger: b.log})
	if err != nil {
		return nil, err
	}
	if err := ob.Migrate(ctx); err != nil {
		return nil, err
	}
	defer b.env.dropTable(context.WithoutCancel(ctx), "outbox_cost", "outbox_cost_lease", "outbox_cost_relay")
	chk, err := checker.New(db, checker.Config{Table: "barrier_cost", Logger: b.log})
	if err != nil {
		return nil, err
	}
	if err := chk.Migrate(ctx); err != nil {
		return nil, err
	}
	defer b.env.dropTable(context.WithoutCancel(ctx), "barrier_cost", "barrier_cost_horizon")
	tr, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{
		Conn: txrmq.Conn{NameServers: []string{b.cfg.NameServer}, Logger: b.log}, Group: b.env.group("cost" + txmsg.NewID()[28:]),
		Topics: []string{topic},
	})
	if err != nil {
		return nil, err
	}
	if err := tr.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = tr.Close(context.WithoutCancel(ctx)) }()
	viaTx, err := txmsg.NewProducer(tr, txmsg.Topic[OrderCreated]{Name: topic})
	if err != nil {
		return nil, err
	}
	viaOutbox, err := txmsg.NewProducer(ob, txmsg.Topic[OrderCreated]{Name: topic})
	if err != nil {
		return nil, err
	}
	minimal := func(o *order) func(context.Context, *gorm.DB) error {
		return func(_ context.Context, tx *gorm.DB) error { return tx.Create(o).Error }
	}
	var committed, rolledBack []string
	cases := []costCase{
		{"B0 order", func(ctx context.Context, seq int64) error {
			o, _ := newOrder(seq)
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return minimal(o)(ctx, tx) })
		}},
		{"B2 transactional", func(ctx context.Context, seq int64) error {
			o, evt := newOrder(seq)
			r, err := viaTx.Send(ctx, evt, minimal(o))
			if err == nil {
				committed = append(committed, r.ID)
			}
			return err
		}},
		{"B3 outbox", func(ctx context.Context, seq int64) error {
			o, evt := newOrder(seq)
			_, err := viaOutbox.Send(ctx, evt, minimal(o))
			return err
		}},
		{"B0r order+lines+stock", func(ctx context.Context, seq int64) error {
			o, _ := newOrder(seq)
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return realisticWrite(o)(ctx, tx) })
		}},
		{"B2r transactional", func(ctx context.Context, seq int64) error {
			o, evt := newOrder(seq)
			_, err := viaTx.Send(ctx, evt, realisticWrite(o))
			return err
		}},
		{"B3r outbox", func(ctx context.Context, seq int64) error {
			o, evt := newOrder(seq)
			_, err := viaOutbox.Send(ctx, evt, realisticWrite(o))
			return err
		}},
		{"resolve unknown ID (records rolled_back)", func(ctx context.Context, _ int64) error {
			id := txmsg.NewID()
			st, err := chk.Resolve(ctx, id)
			if err == nil && st != txmsg.StateRolledBack {
				err = fmt.Errorf("resolve %s: %s", id, st)
			}
			rolledBack = append(rolledBack, id)
			return err
		}},
		{"resolve committed ID", func(ctx context.Context, seq int64) error {
			id := committed[int(seq)%len(committed)]
			st, err := chk.Resolve(ctx, id)
			if err == nil && st != txmsg.StateCommitted {
				err = fmt.Errorf("resolve %s: %s", id, st)
			}
			return err
		}},
		{"resolve rolled-back ID", func(ctx context.Context, seq int64) error {
			id := rolledBack[int(seq)%len(rolledBack)]
			st, err := chk.Resolve(ctx, id)
			if err == nil && st != txmsg.StateRolledBack {
				err = fmt.Errorf("resolve %s: %s", id, st)
			}
			return err
		}},
	}
	events := costEvents
	if b.cfg.Smoke {
		events = 20
	}
	res := map[string]any{}
	for _, c := range cases {
		// A few events first, not counted: new pool connections and the
		// first use of each statement.
		for i := range 10 {
			if err := retryBusy(ctx, func() error { return c.run(ctx, int64(events+i)) }); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
		}
		wire.reset()
		for i := range events {
			if err := retryBusy(ctx, func() error { return c.run(ctx, int64(i)) }); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
		}
		res[c.name] = perEvent(wire.snapshot(), events)
	}
	relay, err := b.relayCost(ctx, db, ob, topic)
	if err != nil {
		return nil, err
	}
	res["relay, per message published"] = relay
	return res, nil
}

// relayCost drains what B3 and B3r left in the cost outbox (2 ×
// costEvents rows) with one relay and counts its traffic per message.
func (b *bench) relayCost(ctx context.Context, db *gorm.DB, ob *outbox.Outbox, topic string) (map[string]any, error) {
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{
		Conn: txrmq.Conn{NameServers: []string{b.cfg.NameServer}, Logger: b.log}, Group: b.env.group("costpub" + txmsg.NewID()[28:]),
		Topics: []string{topic},
	})
	if err != nil {
		return nil, err
	}
	if err := pub.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()
	if err := warmPublisher(ctx, pub, topic); err != nil {
		return nil, err
	}
	relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{Logger: b.log})
	if err != nil {
		return nil, err
	}
	// Stats through an Outbox on the benchmark's own pool, which is not
	// counted.
	watch, err := outbox.New(b.env.db, outbox.Config{Table: "outbox_cost", Logger: b.log})
	if err != nil {
		return nil, err
	}
	st, err := watch.Stats(ctx)
	if err != nil {
		return nil, err
	}
	n := st.Pending
	wire.reset()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(rctx) }()
	deadline := time.Now().Add(2 * time.Minute)
	var snap wireSnapshot
	for {
		snap = wire.snapshot()
		st, err := watch.Stats(ctx)
		if err != nil {
			stop()
			<-done
			return nil, err
		}
		if st.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			stop()
			<-done
			return nil, fmt.Errorf("relay left %d of %d rows pending", st.Pending, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	return perEvent(snap, int(n)), nil
}

// perEvent divides a snapshot by n events.
func perEvent(s wireSnapshot, n int) map[string]any {
	r := func(v int64) float64 { return math.Round(float64(v)/float64(n)*100) / 100 }
	cmds := map[string]float64{}
	var total int64
	for k, v := range s.cmds {
		cmds[k] = r(v)
		if k != "close" {
			total += v
		}
	}
	return map[string]any{
		"commands": cmds, "commands_total_excl_close": r(total), "round_trips": r(s.roundTrips),
		"bytes_to_db": r(s.out), "bytes_from_db": r(s.in), "events": n,
	}
}

// sizeRows is how many rows each table gets for the size measurement:
// enough pages that the per-row figure does not depend on one half-empty
// page.
const sizeRows = 20_000

// rowSizes fills an outbox, a barrier and an inbox table with sizeRows
// rows each, in the shape txmsg writes them (B3's OrderCreated event), and
// reads the bytes per row of the clustered index (the row) and of each
// secondary index from the buffer pool: the records' bytes, and the bytes
// of the pages that hold them.
func (b *bench) rowSizes(ctx context.Context) (map[string]any, error) {
	db := b.env.db
	ob, err := outbox.New(db, outbox.Config{Table: "size_outbox", Logger: b.log})
	if err != nil {
		return nil, err
	}
	if err := ob.Migrate(ctx); err != nil {
		return nil, err
	}
	chk, err := checker.New(db, checker.Config{Table: "size_barrier", Logger: b.log})
	if err != nil {
		return nil, err
	}
	if err := chk.Migrate(ctx); err != nil {
		return nil, err
	}
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{Table: "size_inbox", ParkedTable: "size_dead", Logger: b.log})
	if err != nil {
		return nil, err
	}
	if err := inbox.Migrate(ctx); err != nil {
		return nil, err
	}
	defer b.env.dropTable(context.WithoutCancel(ctx), "size_outbox", "size_outbox_lease", "size_outbox_relay", "size_barrier", "size_barrier_horizon", "size_inbox", "size_dead")
	group := b.env.group("consumer")
	topic := "txbench_" + b.env.runID + "_b3"
	orders, err := txmsg.NewProducer(ob, txmsg.Topic[OrderCreated]{Name: topic})
	if err != nil {
		return nil, err
	}
	n := sizeRows
	if b.cfg.Smoke {
		n = 2 * fillChunk
	}
	for start := 0; start < n; start += fillChunk {
		msgs := make([]*txmsg.Message, 0, fillChunk)
		barriers := make([]checker.Barrier, 0, fillChunk)
		inboxRows := make([]map[string]any, 0, fillChunk)
		now := time.Now().UTC()
		for i := start; i < start+fillChunk; i++ {
			o, evt := newOrder(int64(i))
			m, err := orders.Message(evt, txmsg.WithKeys(o.OrderNo), txmsg.WithID(txmsg.NewID()))
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
			barriers = append(barriers, checker.Barrier{TxID: m.ID, State: checker.StateCommitted, CreatedAt: now})
			inboxRows = append(inboxRows, map[string]any{"consumer_group": group, "msg_id": m.ID, "topic": topic, "handled_at": now})
		}
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := ob.EnqueueTx(ctx, tx, msgs...); err != nil {
				return err
			}
			if err := tx.Table("size_barrier").Create(&barriers).Error; err != nil {
				return err
			}
			return tx.Table("size_inbox").Create(&inboxRows).Error
		})
		if err != nil {
			return nil, fmt.Errorf("fill size tables: %w", err)
		}
	}
	var page int64
	if err := db.WithContext(ctx).Raw("SELECT @@innodb_page_size").Scan(&page).Error; err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, t := range []string{"size_outbox", "size_barrier", "size_inbox"} {
		// The pages were just written, so they are in the buffer pool:
		// INNODB_BUFFER_PAGE has each one's index and record bytes.
		var idx []struct {
			IndexName string
			Pages     int64
			Data      int64
		}
		err := db.WithContext(ctx).Raw("SELECT index_name, COUNT(*) AS pages, SUM(data_size) AS data "+
			"FROM information_schema.INNODB_BUFFER_PAGE WHERE table_name = CONCAT('`', DATABASE(), '`.`', ?, '`') "+
			"GROUP BY index_name", t).Scan(&idx).Error
		if err != nil {
			out[strings.TrimPrefix(t, "size_")] = "unknown: " + err.Error()
			continue
		}
		per := map[string]any{}
		for _, x := range idx {
			per[x.IndexName] = map[string]float64{
				"record_bytes_per_row": math.Round(float64(x.Data)/float64(n)*10) / 10,
				"page_bytes_per_row":   math.Round(float64(x.Pages*page)/float64(n)*10) / 10,
			}
		}
		out[strings.TrimPrefix(t, "size_")] = per
	}
	return out, nil
}

// retryBusy retries fn a few times when the broker pushes back (flow
// control on a loaded machine). A refused half message reaches no
// database, so the counts stay those of the events that went through.
func retryBusy(ctx context.Context, fn func() error) error {
	var err error
	for range 5 {
		if err = fn(); err == nil || !strings.Contains(err.Error(), "broker busy") {
			return err
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	return err
}

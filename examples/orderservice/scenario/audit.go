package scenario

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// Table names the audit reads: the service's tables and txmsg's inbox.
const (
	ordersTable     = "orders"
	deductionsTable = "deductions"
	inventoryTable  = "inventory"
	inboxTable      = "txmsg_inbox"
)

// Report is the consistency report of one run.
type Report struct {
	// Run is what the driver saw.
	Run *Run
	// OrdersInDB counts the rows of the orders table.
	OrdersInDB int64
	// Confirmed and Rejected count the orders the consumer decided;
	// Rejected are over-stock rejections.
	Confirmed, Rejected int64
	// DeductionsApplied counts the rows of the deductions table.
	DeductionsApplied int64
	// EventsHandled counts inbox rows: events whose handler committed.
	EventsHandled int64
	// EventsLost counts committed orders the consumer never decided
	// (still pending at the deadline). Must be 0.
	EventsLost int64
	// DuplicateEffects counts orders with more than one deduction plus
	// SKUs whose stock is not initial - sum(deductions). Must be 0.
	DuplicateEffects int64
	// Stock is each SKU's bookkeeping.
	Stock []StockLine
	// Drained is how long the consumer took to decide every order after
	// the last request.
	Drained time.Duration
	// Problems lists every broken invariant; empty means consistent.
	Problems []string
}

// StockLine is one SKU's stock bookkeeping.
type StockLine struct {
	SKU                      string
	Initial, Deducted, Final int
}

// Consistent reports whether no invariant was broken.
func (r *Report) Consistent() bool { return len(r.Problems) == 0 }

// Audit waits until the consumer has decided every order in db (or until
// drainTimeout), then checks the run's invariants against the tables.
// progress, when set, shows the wait.
func Audit(ctx context.Context, db *gorm.DB, run *Run, drainTimeout time.Duration, progress io.Writer) (*Report, error) {
	rep := &Report{Run: run}
	db = db.WithContext(ctx)
	if err := drain(ctx, db, run, drainTimeout, progress, rep); err != nil {
		return nil, err
	}

	var orders []struct {
		ID     string
		Status string
	}
	if err := db.Table(ordersTable).Select("id, status").Find(&orders).Error; err != nil {
		return nil, fmt.Errorf("scenario: read orders: %w", err)
	}
	status := make(map[string]string, len(orders))
	for _, o := range orders {
		status[o.ID] = o.Status
		switch o.Status {
		case "confirmed":
			rep.Confirmed++
		case "rejected":
			rep.Rejected++
		case "pending":
			rep.EventsLost++
		}
	}
	rep.OrdersInDB = int64(len(orders))

	missing := 0
	for _, id := range run.Created {
		if _, ok := status[id]; !ok {
			missing++
		}
	}
	rep.problem(missing > 0, "%d orders the API committed are not in the database", missing)
	extra := len(orders) - (len(run.Created) - missing)
	rep.problem(extra > run.Failed, "%d orders in the database were never reported committed (only %d requests failed)", extra, run.Failed)
	rep.problem(rep.EventsLost > 0, "%d events lost: committed orders still pending after %s", rep.EventsLost, drainTimeout)
	for _, id := range run.OverStock {
		rep.problem(status[id] == "confirmed", "order %s asked for more than the initial stock and was confirmed", id)
	}
	for _, u := range run.Unexpected {
		rep.problem(true, "API: %s", u)
	}

	var n int64
	if err := db.Table(deductionsTable).Count(&rep.DeductionsApplied).Error; err != nil {
		return nil, fmt.Errorf("scenario: count deductions: %w", err)
	}
	if err := db.Table(inboxTable).Count(&rep.EventsHandled).Error; err != nil {
		return nil, fmt.Errorf("scenario: count inbox rows: %w", err)
	}
	decided := rep.Confirmed + rep.Rejected
	rep.problem(rep.EventsHandled != decided, "%d events handled but %d orders decided", rep.EventsHandled, decided)

	if err := db.Raw("SELECT COUNT(*) FROM (SELECT order_id FROM " + deductionsTable + " GROUP BY order_id HAVING COUNT(*) > 1) AS d").Scan(&n).Error; err != nil {
		return nil, fmt.Errorf("scenario: find repeated deductions: %w", err)
	}
	rep.DuplicateEffects += n
	rep.problem(n > 0, "%d orders have more than one deduction", n)

	if err := db.Raw("SELECT COUNT(*) FROM " + ordersTable + " o LEFT JOIN " + deductionsTable + " d ON d.order_id = o.id WHERE o.status = 'confirmed' AND d.id IS NULL").Scan(&n).Error; err != nil {
		return nil, fmt.Errorf("scenario: match orders and deductions: %w", err)
	}
	rep.problem(n > 0, "%d confirmed orders have no deduction", n)
	if err := db.Raw("SELECT COUNT(*) FROM " + deductionsTable + " d LEFT JOIN " + ordersTable + " o ON o.id = d.order_id WHERE o.id IS NULL OR o.status <> 'confirmed'").Scan(&n).Error; err != nil {
		return nil, fmt.Errorf("scenario: match deductions and orders: %w", err)
	}
	rep.problem(n > 0, "%d deductions belong to orders that are not confirmed", n)

	if err := auditStock(db, run, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// auditStock checks, per SKU, that the stock left is the initial stock
// minus the deductions, and never negative.
func auditStock(db *gorm.DB, run *Run, rep *Report) error {
	var final []struct {
		SKU   string
		Stock int
	}
	if err := db.Table(inventoryTable).Select("sku, stock").Find(&final).Error; err != nil {
		return fmt.Errorf("scenario: read inventory: %w", err)
	}
	var deducted []struct {
		SKU string
		N   int
	}
	if err := db.Table(deductionsTable).Select("sku, SUM(quantity) AS n").Group("sku").Find(&deducted).Error; err != nil {
		return fmt.Errorf("scenario: sum deductions: %w", err)
	}
	sum := map[string]int{}
	for _, d := range deducted {
		sum[d.SKU] = d.N
	}
	for _, f := range final {
		line := StockLine{SKU: f.SKU, Initial: run.InitialStock[f.SKU], Deducted: sum[f.SKU], Final: f.Stock}
		rep.Stock = append(rep.Stock, line)
		if line.Final != line.Initial-line.Deducted {
			rep.DuplicateEffects++
			rep.problem(true, "stock of %s is %d, want %d - %d = %d", f.SKU, line.Final, line.Initial, line.Deducted, line.Initial-line.Deducted)
		}
		rep.problem(line.Final < 0, "stock of %s is negative: %d", f.SKU, line.Final)
	}
	slices.SortFunc(rep.Stock, func(a, b StockLine) int { return strings.Compare(a.SKU, b.SKU) })
	return nil
}

// drain polls until no order is pending and every committed order is in
// the database, or until timeout.
func drain(ctx context.Context, db *gorm.DB, run *Run, timeout time.Duration, w io.Writer, rep *Report) error {
	start := time.Now()
	deadline := start.Add(timeout)
	var shown atomic.Value // string, read by the progress line
	shown.Store("")
	stop := progress(w, func() string {
		return fmt.Sprintf("waiting for the inventory consumer: %s orders decided", shown.Load())
	})
	defer stop()
	for {
		var total, pending int64
		if err := db.Table(ordersTable).Count(&total).Error; err != nil {
			return fmt.Errorf("scenario: count orders: %w", err)
		}
		if err := db.Table(ordersTable).Where("status = ?", "pending").Count(&pending).Error; err != nil {
			return fmt.Errorf("scenario: count pending orders: %w", err)
		}
		shown.Store(fmt.Sprintf("%d of %d", total-pending, total))
		if pending == 0 && total >= int64(len(run.Created)) {
			rep.Drained = time.Since(start)
			return nil
		}
		if time.Now().After(deadline) {
			rep.Drained = time.Since(start)
			return nil // the audit reports what is left as lost
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *Report) problem(broken bool, format string, args ...any) {
	if broken {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	run := r.Run
	row := func(label string, v any, note string) {
		fmt.Fprintf(w, "  %-34s %6v  %s\n", label, v, note)
	}
	fmt.Fprintln(w, "consistency report")
	row("order requests sent", run.Sent, fmt.Sprintf("(in %s)", run.Took.Round(time.Millisecond)))
	row("orders committed", len(run.Created), "(HTTP 201)")
	row("orders rejected by validation", run.RejectedByValidation, "(HTTP 4xx; nothing written or sent)")
	if run.Failed > 0 {
		row("order requests failed", run.Failed, "(HTTP 5xx or transport error)")
	}
	row("orders confirmed", r.Confirmed, "")
	row("deductions applied", r.DeductionsApplied, "")
	row("over-stock rejections", r.Rejected, fmt.Sprintf("(%d asked for more than the initial stock)", len(run.OverStock)))
	row("events handled (inbox rows)", r.EventsHandled, fmt.Sprintf("(all decided %s after the last request)", r.Drained.Round(time.Millisecond)))
	row("events lost", r.EventsLost, "(must be 0)")
	row("duplicate effects", r.DuplicateEffects, "(must be 0)")
	fmt.Fprintln(w, "  stock:")
	for _, s := range r.Stock {
		fmt.Fprintf(w, "    %-8s %4d - %4d deducted = %4d\n", s.SKU, s.Initial, s.Deducted, s.Final)
	}
	if r.Consistent() {
		fmt.Fprintln(w, "CONSISTENT")
		return
	}
	fmt.Fprintln(w, "INCONSISTENT:")
	for _, p := range r.Problems {
		fmt.Fprintln(w, "  - "+p)
	}
}

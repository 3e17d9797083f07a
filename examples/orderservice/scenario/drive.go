// Package scenario drives the order service over HTTP, as `make demo` and
// the end-to-end test do, and audits its database afterwards: every order
// the API committed must be decided by the inventory consumer exactly once,
// and the stock must equal what was deducted from it.
package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configures Drive.
type Options struct {
	// BaseURL is the service's root, e.g. "http://127.0.0.1:8080".
	// Required.
	BaseURL string
	// Orders is how many requests to send. Default 200.
	Orders int
	// Concurrency is how many requests are in flight at once. Default 8.
	Concurrency int
	// Seed makes the mix of orders reproducible. Default 1.
	Seed uint64
	// Progress, when set, receives a progress line updated in place.
	Progress io.Writer
	// Client sends the requests. Default: a client with a 30 s timeout.
	Client *http.Client
}

// Kind is what a request is meant to test.
type Kind int

// The kinds of request Drive sends.
const (
	// Valid is an ordinary order for 1 or 2 units of a known SKU; it may
	// still be rejected when the SKU runs out.
	Valid Kind = iota
	// OverStock asks for more units than the SKU ever had: accepted by
	// the API, rejected by the inventory consumer.
	OverStock
	// ZeroQuantity, NegativeQuantity, UnknownSKU, MissingUser and
	// OversizedBody must be refused by the API with a 4xx before anything
	// is written or sent.
	ZeroQuantity
	NegativeQuantity
	UnknownSKU
	MissingUser
	OversizedBody
)

var kindNames = map[Kind]string{
	Valid: "valid", OverStock: "over-stock", ZeroQuantity: "zero quantity", NegativeQuantity: "negative quantity",
	UnknownSKU: "unknown sku", MissingUser: "missing user", OversizedBody: "oversized body",
}

func (k Kind) String() string { return kindNames[k] }

// invalidKinds are cycled through for the requests meant to be refused.
var invalidKinds = []Kind{ZeroQuantity, UnknownSKU, OversizedBody, NegativeQuantity, MissingUser}

// wantStatus is the status the API must answer each kind with.
var wantStatus = map[Kind]int{
	Valid: http.StatusCreated, OverStock: http.StatusCreated,
	ZeroQuantity: http.StatusUnprocessableEntity, NegativeQuantity: http.StatusUnprocessableEntity,
	UnknownSKU: http.StatusUnprocessableEntity, MissingUser: http.StatusUnprocessableEntity,
	OversizedBody: http.StatusRequestEntityTooLarge,
}

// Run is what Drive saw.
type Run struct {
	// InitialStock is each SKU's stock before the first order.
	InitialStock map[string]int
	// Sent counts the requests sent.
	Sent int
	// Created are the IDs of the orders the API committed (201).
	Created []string
	// OverStock are the created orders that asked for more than their
	// SKU's initial stock; each must end up rejected.
	OverStock []string
	// RejectedByValidation counts the requests refused with the expected
	// 4xx.
	RejectedByValidation int
	// Failed counts 5xx answers and transport errors: the order may or may
	// not exist (the audit finds out).
	Failed int
	// Unexpected describes answers that broke the API's contract, such as
	// an invalid order accepted.
	Unexpected []string
	// Took is how long sending took.
	Took time.Duration
}

type request struct {
	kind Kind
	body []byte
}

// plan builds the requests: one in ten is invalid (cycling through the
// invalid kinds), one in ten is over-stock, the rest are valid.
func plan(o Options, stock map[string]int) []request {
	skus := make([]string, 0, len(stock))
	for s := range stock {
		skus = append(skus, s)
	}
	slices.Sort(skus)
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	reqs := make([]request, o.Orders)
	invalid := 0
	for i := range reqs {
		sku := skus[rng.IntN(len(skus))]
		user := fmt.Sprintf("user-%d", rng.IntN(50))
		body := map[string]any{"user_id": user, "sku": sku, "quantity": 1 + rng.IntN(2)}
		kind := Valid
		switch i % 10 {
		case 4:
			kind = invalidKinds[invalid%len(invalidKinds)]
			invalid++
		case 8:
			kind = OverStock
		}
		switch kind {
		case OverStock:
			body["quantity"] = stock[sku] + 1 + rng.IntN(10)
		case ZeroQuantity:
			body["quantity"] = 0
		case NegativeQuantity:
			body["quantity"] = -1 - rng.IntN(5)
		case UnknownSKU:
			body["sku"] = "no-such-sku"
		case MissingUser:
			delete(body, "user_id")
		case OversizedBody:
			body["user_id"] = strings.Repeat("x", 70<<10)
		}
		b, _ := json.Marshal(body)
		reqs[i] = request{kind: kind, body: b}
	}
	return reqs
}

// Drive reads the initial stock, then sends opts.Orders order requests
// and records what the API answered.
func Drive(ctx context.Context, opts Options) (*Run, error) {
	if opts.BaseURL == "" {
		return nil, fmt.Errorf("scenario: BaseURL is required")
	}
	if opts.Orders <= 0 {
		opts.Orders = 200
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 30 * time.Second}
	}
	stock, err := InitialStock(ctx, opts.Client, opts.BaseURL)
	if err != nil {
		return nil, err
	}
	run := &Run{InitialStock: stock}
	reqs := plan(opts, stock)

	var mu sync.Mutex
	work := make(chan request)
	var wg sync.WaitGroup
	start := time.Now()
	for range opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				status, id, err := post(ctx, opts.Client, opts.BaseURL, r.body)
				mu.Lock()
				run.record(r.kind, status, id, err)
				mu.Unlock()
			}
		}()
	}
	stopProgress := progress(opts.Progress, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("orders %3d/%d   committed %3d   refused %3d   failed %d",
			run.Sent, opts.Orders, len(run.Created), run.RejectedByValidation, run.Failed)
	})
	for _, r := range reqs {
		if ctx.Err() != nil {
			break
		}
		work <- r
	}
	close(work)
	wg.Wait()
	stopProgress()
	run.Took = time.Since(start)
	return run, ctx.Err()
}

func (run *Run) record(kind Kind, status int, id string, err error) {
	run.Sent++
	switch {
	case err != nil || status >= 500:
		run.Failed++
	case status == wantStatus[kind] && status == http.StatusCreated:
		run.Created = append(run.Created, id)
		if kind == OverStock {
			run.OverStock = append(run.OverStock, id)
		}
	case status == wantStatus[kind]:
		run.RejectedByValidation++
	default:
		if status == http.StatusCreated {
			run.Created = append(run.Created, id)
		}
		run.Unexpected = append(run.Unexpected, fmt.Sprintf("%s order: got HTTP %d, want %d", kind, status, wantStatus[kind]))
	}
}

// post sends one order and returns the status and, on 201, the order ID.
func post(ctx context.Context, c *http.Client, base string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var out struct {
		ID string `json:"id"`
	}
	if resp.StatusCode == http.StatusCreated {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.ID == "" {
			return resp.StatusCode, "", fmt.Errorf("201 without an order id: %v", err)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, out.ID, nil
}

// InitialStock reads every SKU's stock through GET /inventory.
func InitialStock(ctx context.Context, c *http.Client, base string) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/inventory", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scenario: read inventory: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scenario: read inventory: HTTP %d", resp.StatusCode)
	}
	var items []struct {
		SKU   string `json:"sku"`
		Stock int    `json:"stock"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&items); err != nil {
		return nil, fmt.Errorf("scenario: read inventory: %w", err)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("scenario: the inventory is empty; start the service with -seed")
	}
	stock := make(map[string]int, len(items))
	for _, it := range items {
		stock[it.SKU] = it.Stock
	}
	return stock, nil
}

// progress redraws line() on w every 100 ms until the returned function is
// called, which draws it a last time and ends the line.
func progress(w io.Writer, line func() string) (stop func()) {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "\r  %s", line())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		fmt.Fprintf(w, "\r  %s\n", line())
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// recordingTransactor is a txmsg.Transactor that runs the local
// transaction on the real database and records the messages, without a
// broker.
type recordingTransactor struct {
	db   *gorm.DB
	mu   sync.Mutex
	msgs []*txmsg.Message
}

func (r *recordingTransactor) Transact(ctx context.Context, msg *txmsg.Message, local txmsg.LocalTx) (*txmsg.Receipt, error) {
	r.mu.Lock()
	r.msgs = append(r.msgs, msg.Clone())
	r.mu.Unlock()
	if msg.ID == "" {
		msg.ID = txmsg.NewID()
	}
	err := r.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return local(ctx, tx) })
	if err != nil {
		return &txmsg.Receipt{ID: msg.ID, State: txmsg.StateRolledBack}, err
	}
	return &txmsg.Receipt{ID: msg.ID, State: txmsg.StateCommitted}, nil
}

func (r *recordingTransactor) sent() []*txmsg.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*txmsg.Message(nil), r.msgs...)
}

// apiBed is an API over its own database, seeded, with a recording
// Transactor in place of a mode.
type apiBed struct {
	db  *gorm.DB
	tr  *recordingTransactor
	srv *httptest.Server
}

func newAPIBed(t *testing.T) *apiBed {
	t.Helper()
	db := testbed.DB(t)
	require.NoError(t, db.AutoMigrate(&Order{}, &StockItem{}, &Deduction{}))
	inv := NewInventory(db)
	require.NoError(t, inv.Seed(t.Context()))
	tr := &recordingTransactor{db: db}
	events, err := txmsg.NewProducer(tr, txmsg.Topic[OrderCreated]{Name: "order-created"})
	require.NoError(t, err)
	srv := httptest.NewServer(NewAPI(NewOrders(db, events), inv, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	return &apiBed{db: db, tr: tr, srv: srv}
}

func (b *apiBed) do(t *testing.T, method, path string, body []byte) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+path, bytes.NewReader(body))
	require.NoError(t, err)
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "body: %s", raw)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	return resp.StatusCode, out, resp.Header
}

func (b *apiBed) orders(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.db.Model(&Order{}).Count(&n).Error)
	return n
}

// TestPlaceOrderRejectsInvalidRequests checks that each invalid request
// gets its 4xx and a JSON error before anything is written or sent.
func TestPlaceOrderRejectsInvalidRequests(t *testing.T) {
	t.Parallel()
	b := newAPIBed(t)
	cases := []struct {
		name   string
		body   string
		status int
		errHas string
	}{
		{"zero quantity", `{"user_id":"u1","sku":"apple","quantity":0}`, http.StatusUnprocessableEntity, "quantity must be positive"},
		{"negative quantity", `{"user_id":"u1","sku":"apple","quantity":-3}`, http.StatusUnprocessableEntity, "quantity must be positive"},
		{"missing quantity", `{"user_id":"u1","sku":"apple"}`, http.StatusUnprocessableEntity, "quantity must be positive"},
		{"unknown sku", `{"user_id":"u1","sku":"durian","quantity":1}`, http.StatusUnprocessableEntity, "unknown sku"},
		{"missing sku", `{"user_id":"u1","quantity":1}`, http.StatusUnprocessableEntity, "sku must be"},
		{"missing user", `{"sku":"apple","quantity":1}`, http.StatusUnprocessableEntity, "user_id must be"},
		{"user too long", `{"user_id":"` + strings.Repeat("u", 65) + `","sku":"apple","quantity":1}`, http.StatusUnprocessableEntity, "user_id must be"},
		{"oversized body", `{"user_id":"` + strings.Repeat("u", 70<<10) + `","sku":"apple","quantity":1}`, http.StatusRequestEntityTooLarge, "larger than 65536 bytes"},
		{"oversized trailing padding", `{"user_id":"u1","sku":"apple","quantity":1}` + strings.Repeat(" ", 70<<10), http.StatusRequestEntityTooLarge, "larger than 65536 bytes"},
		{"malformed JSON", `{"user_id":"u1","sku":`, http.StatusBadRequest, "not a valid order"},
		{"wrong type", `{"user_id":"u1","sku":"apple","quantity":"two"}`, http.StatusBadRequest, "not a valid order"},
		{"unknown field", `{"user_id":"u1","sku":"apple","quantity":1,"price":3}`, http.StatusBadRequest, "unknown field"},
		{"two values", `{"user_id":"u1","sku":"apple","quantity":1}{}`, http.StatusBadRequest, "more than one JSON value"},
		{"empty body", ``, http.StatusBadRequest, "not a valid order"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, out, _ := b.do(t, http.MethodPost, "/orders", []byte(tc.body))
			require.Equal(t, tc.status, status)
			require.Contains(t, out["error"], tc.errHas)
		})
	}
	require.Empty(t, b.tr.sent(), "no message may be sent for an invalid order")
	require.Zero(t, b.orders(t), "no order may be written for an invalid order")
}

func TestPlaceOrderAndRead(t *testing.T) {
	t.Parallel()
	b := newAPIBed(t)
	status, out, hdr := b.do(t, http.MethodPost, "/orders", []byte(`{"user_id":"u1","sku":"apple","quantity":1000}`))
	require.Equal(t, http.StatusCreated, status, "an over-stock order is accepted; the consumer decides")
	id, _ := out["id"].(string)
	require.NotEmpty(t, id)
	require.Equal(t, "/orders/"+id, hdr.Get("Location"))
	require.Equal(t, StatusPending, out["status"])

	sent := b.tr.sent()
	require.Len(t, sent, 1)
	require.Equal(t, "order-created", sent[0].Topic)
	require.Equal(t, out["event_id"], sent[0].ID)
	require.Contains(t, sent[0].Keys, id)
	event, err := txmsg.JSONCodec[OrderCreated]{}.Decode(sent[0].Body)
	require.NoError(t, err)
	require.Equal(t, OrderCreated{OrderID: id, UserID: "u1", SKU: "apple", Quantity: 1000, CreatedAt: event.CreatedAt}, event)

	status, out, _ = b.do(t, http.MethodGet, "/orders/"+id, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, id, out["id"])
	require.EqualValues(t, 1000, out["quantity"])

	status, out, _ = b.do(t, http.MethodGet, "/orders/no-such-order", nil)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "not found", out["error"])

	status, out, _ = b.do(t, http.MethodGet, "/inventory/apple", nil)
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 150, out["stock"], "placing an order does not touch the stock")
	status, _, _ = b.do(t, http.MethodGet, "/inventory/durian", nil)
	require.Equal(t, http.StatusNotFound, status)
}

// TestPlaceOrderRollsBackWhenTheSendFails checks that a failing
// Transactor leaves no order behind and answers 503.
func TestPlaceOrderRollsBackWhenTheSendFails(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	require.NoError(t, db.AutoMigrate(&Order{}, &StockItem{}, &Deduction{}))
	inv := NewInventory(db)
	require.NoError(t, inv.Seed(t.Context()))
	events, err := txmsg.NewProducer[OrderCreated](failingTransactor{}, txmsg.Topic[OrderCreated]{Name: "order-created"})
	require.NoError(t, err)
	srv := httptest.NewServer(NewAPI(NewOrders(db, events), inv, slog.New(slog.DiscardHandler)))
	defer srv.Close()

	resp, err := srv.Client().Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"user_id":"u1","sku":"apple","quantity":1}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var n int64
	require.NoError(t, db.Model(&Order{}).Count(&n).Error)
	require.Zero(t, n)
}

// failingTransactor fails like a transactional producer whose half send
// did not reach the broker: local never runs.
type failingTransactor struct{}

func (failingTransactor) Transact(context.Context, *txmsg.Message, txmsg.LocalTx) (*txmsg.Receipt, error) {
	return nil, io.ErrUnexpectedEOF
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/txmsg/txmsg/txmsg"
)

// maxBodyBytes is the largest request body the API reads.
const maxBodyBytes = 64 << 10

// API is the service's HTTP JSON interface:
//
//	POST /orders           {"user_id", "sku", "quantity"} → 201 and the order
//	GET  /orders/{id}      → the order, with its status
//	GET  /inventory        → every SKU's stock
//	GET  /inventory/{sku}  → one SKU's stock
//
// Errors are JSON objects {"error": "..."}. The App serves /healthz and
// /metrics next to it.
type API struct {
	orders    *Orders
	inventory *Inventory
	log       *slog.Logger
	mux       *http.ServeMux
}

// NewAPI returns the API over orders and inventory.
func NewAPI(orders *Orders, inventory *Inventory, log *slog.Logger) *API {
	a := &API{orders: orders, inventory: inventory, log: log, mux: http.NewServeMux()}
	a.mux.HandleFunc("POST /orders", a.placeOrder)
	a.mux.HandleFunc("GET /orders/{id}", a.getOrder)
	a.mux.HandleFunc("GET /inventory", a.listInventory)
	a.mux.HandleFunc("GET /inventory/{sku}", a.getStock)
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

func (a *API) placeOrder(w http.ResponseWriter, r *http.Request) {
	var req PlaceOrder
	if status, err := decodeJSON(w, r, &req); err != nil {
		writeError(w, status, err.Error())
		return
	}
	order, err := a.orders.Place(r.Context(), req)
	switch {
	case err == nil:
		w.Header().Set("Location", "/orders/"+order.ID)
		writeJSON(w, http.StatusCreated, order)
	case errors.Is(err, ErrInvalidOrder), errors.Is(err, ErrUnknownSKU):
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, txmsg.ErrOutcomeUnknown):
		// The commit's answer was lost; the database knows. The client
		// should read the order rather than place it again.
		a.log.Warn("order outcome unknown", "order_id", order.ID, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{
			"error":    "the order may or may not have been placed; GET /orders/" + order.ID + " to find out",
			"order_id": order.ID,
		})
	default:
		a.log.Error("order not placed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "the order was not placed; try again")
	}
}

func (a *API) getOrder(w http.ResponseWriter, r *http.Request) {
	order, err := a.orders.Get(r.Context(), r.PathValue("id"))
	a.respond(w, order, err)
}

func (a *API) getStock(w http.ResponseWriter, r *http.Request) {
	item, err := a.inventory.Get(r.Context(), r.PathValue("sku"))
	a.respond(w, item, err)
}

func (a *API) listInventory(w http.ResponseWriter, r *http.Request) {
	items, err := a.inventory.List(r.Context())
	a.respond(w, items, err)
}

func (a *API) respond(w http.ResponseWriter, v any, err error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, v)
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "not found")
	default:
		a.log.Error("read failed", "err", err)
		writeError(w, http.StatusInternalServerError, "internal error")
	}
}

// decodeJSON reads one JSON object of at most maxBodyBytes into v. On
// failure it returns the HTTP status to answer with.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) (int, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// One object, nothing after it.
		if err = dec.Decode(&struct{}{}); err == io.EOF {
			return 0, nil
		}
		if err == nil {
			err = errors.New("more than one JSON value")
		}
	}
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge, fmt.Errorf("request body is larger than %d bytes", maxBodyBytes)
	}
	return http.StatusBadRequest, fmt.Errorf("request body is not a valid order: %w", err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
)

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestHealthzAndMetrics runs the service in both modes against the real
// broker and database: /healthz reports each check, /metrics counts an
// order's event from commit to consumer, and a stopped service is
// unhealthy.
func TestHealthzAndMetrics(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	// The client's logger is process-wide (see TestEndToEnd): not t.Output().
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	type env struct {
		cfg Config
		app *App
	}
	var envs []env
	for _, mode := range []string{ModeTransactional, ModeOutbox} {
		_, dsn := testbed.DBWithDSN(t)
		cfg := Config{
			Mode: mode, HTTPAddr: "127.0.0.1:0", DSN: dsn, NameServers: []string{testbed.NameServer()},
			Topic: testbed.Topic(t), ProducerGroup: testbed.Name(t, "pg_"+mode), ConsumerGroup: testbed.Name(t, "cg_"+mode),
			Seed: true, ShutdownTimeout: 20 * time.Second,
		}
		require.NoError(t, cfg.validate())
		app, cleanup, err := newApp(cfg, log)
		require.NoError(t, err)
		t.Cleanup(cleanup)
		envs = append(envs, env{cfg: cfg, app: app})
	}
	for _, e := range envs {
		t.Run(e.cfg.Mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			require.NoError(t, e.app.Start(ctx))
			t.Cleanup(func() { _ = e.app.Shutdown(context.Background()) })
			base := "http://" + e.app.Addr()

			var health map[string]any
			require.Eventually(t, func() bool {
				code, body := get(t, base+"/healthz")
				require.NoError(t, json.Unmarshal([]byte(body), &health), body)
				return code == http.StatusOK
			}, 30*time.Second, 100*time.Millisecond, "the service becomes healthy")
			require.Equal(t, map[string]any{e.cfg.Mode: "ok", "consumer": "ok"}, health["checks"])

			body, err := json.Marshal(PlaceOrder{UserID: "u1", SKU: "apple", Quantity: 1})
			require.NoError(t, err)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", bytes.NewReader(body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)

			topic := `topic="` + e.cfg.Topic + `"`
			want := []string{
				`txmsg_local_transactions_total{` + topic + `,result="committed"} 1`,
				`txmsg_consumer_messages_total{group="` + e.cfg.ConsumerGroup + `",` + topic + `,result="handled"} 1`,
			}
			if e.cfg.Mode == ModeTransactional {
				want = append(want, `txmsg_half_sends_total{`+topic+`,result="ok"} 1`)
			} else {
				want = append(want, `table="txmsg_outbox",result="ok"} 1`, `txmsg_outbox_rows{table="txmsg_outbox",status="sent"} 1`,
					`txmsg_outbox_oldest_pending_age_seconds{table="txmsg_outbox"} 0`)
			}
			var metrics string
			require.Eventually(t, func() bool {
				_, metrics = get(t, base+"/metrics")
				for _, w := range want {
					if !strings.Contains(metrics, w) {
						return false
					}
				}
				return true
			}, 60*time.Second, 100*time.Millisecond, "metrics: want %q", want)
			require.Contains(t, metrics, "# TYPE txmsg_consumer_messages_total counter")

			require.NoError(t, e.app.Shutdown(ctx))
			rec := httptest.NewRecorder()
			e.app.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/healthz", nil))
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "unhealthy")
		})
	}
}

// TestStartupErrorsHideThePassword checks that a wrong or unparseable DSN
// fails startup without the password in the error.
func TestStartupErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	const password = "pw-orderservice-4c1d9e"
	base, err := mysql.ParseDSN(testbed.DSN())
	require.NoError(t, err)
	base.Passwd = password
	_, cleanup, err := newApp(Config{Mode: ModeOutbox, DSN: base.FormatDSN(), NameServers: []string{testbed.NameServer()},
		Topic: "order-created", ProducerGroup: "pg", ConsumerGroup: "cg"}, slog.New(slog.DiscardHandler))
	if cleanup != nil {
		cleanup()
	}
	require.Error(t, err)
	require.NotContains(t, err.Error(), password)

	_, err = ParseConfig([]string{"-dsn", "txmsg:" + password + "@nowhere"}, func(string) string { return "" }, io.Discard)
	require.Error(t, err)
	require.NotContains(t, err.Error(), password)
}

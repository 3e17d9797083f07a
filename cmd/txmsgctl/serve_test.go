package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestServeRefusesUnsafeSettings: actions without a token, and any
// address but loopback without a token, are command-line errors.
func TestServeRefusesUnsafeSettings(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"TXMSG_DSN": "u:p@tcp(127.0.0.1:1)/db"}
	for _, args := range [][]string{
		{"serve", "-allow-actions"},
		{"serve", "-addr", "0.0.0.0:8089"},
		{"serve", "-addr", ":8089"},
		{"serve", "-addr", "10.2.3.4:8089"},
		{"serve", "-sample-interval", "0s"},
		{"serve", "extra"},
	} {
		r := ctl(t, vars, args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r)
	}
	r := ctl(t, vars, "serve", "-addr", "0.0.0.0:8089")
	require.Contains(t, r.stderr, "without a token")
}

var servedAt = regexp.MustCompile(`on (http://\S+/) \(`)

// TestServeRunsTheDashboard starts txmsgctl serve with a token and
// actions on, reads its URL from stdout, checks that the pages answer the
// token only and never show the DSN's password or the token, and stops it
// by cancelling its context.
func TestServeRunsTheDashboard(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	require.Equal(t, exitOK, ctl(t, map[string]string{"TXMSG_DSN": dsn}, "migrate").code)
	const token = "serve-test-token-42ab"
	vars := map[string]string{"TXMSG_DSN": dsn, "TXMSG_DASHBOARD_TOKEN": token, "TXMSG_NAMESRV": testbed.NameServer()}
	out, errOut := &lockedBuffer{}, &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-allow-actions"}, out, errOut, func(k string) string { return vars[k] })
	}()
	var base string
	require.Eventually(t, func() bool {
		m := servedAt.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, time.Minute, 50*time.Millisecond, "serve printed no URL: %s %s", out, errOut)
	require.Contains(t, out.String(), "actions allowed")

	get := func(path string, hdr map[string]string) (int, string) {
		req, err := http.NewRequest("GET", base+path, nil)
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, _ := get("", map[string]string{"Accept": "application/json"})
	require.Equal(t, http.StatusUnauthorized, code)
	auth := map[string]string{"Authorization": "Bearer " + token}
	for _, p := range []string{"", "outbox", "consumers", "tx?q=x", "broker"} {
		code, body := get(p, auth)
		require.Equal(t, http.StatusOK, code, p)
		require.NotContains(t, body, token, p)
		require.NotContains(t, body, ":txmsg@", p)
	}
	_, body := get("", auth)
	require.Contains(t, body, "name servers")
	require.Contains(t, body, "database")

	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, "%s %s", out, errOut)
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop")
	}
	require.False(t, strings.Contains(out.String()+errOut.String(), token))
}

// TestServeChecksTheHost starts txmsgctl serve without a token and with
// -allowed-hosts: a request from this machine that names another host
// (as a page reaching it through DNS rebinding does) is refused; the
// loopback address and the allowed name are answered.
func TestServeChecksTheHost(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	require.Equal(t, exitOK, ctl(t, map[string]string{"TXMSG_DSN": dsn}, "migrate").code)
	vars := map[string]string{"TXMSG_DSN": dsn}
	r := ctl(t, vars, "serve", "-allowed-hosts", "http://dash.example.com/")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "AllowedHosts")

	out, errOut := &lockedBuffer{}, &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-allowed-hosts", "dash.example.com"}, out, errOut, func(k string) string { return vars[k] })
	}()
	var base string
	require.Eventually(t, func() bool {
		m := servedAt.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, time.Minute, 50*time.Millisecond, "serve printed no URL: %s %s", out, errOut)
	get := func(host string) (int, string) {
		req, err := http.NewRequest("GET", base+"outbox", nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := get("evil.example:8089")
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "-allowed-hosts")
	code, _ = get("")
	require.Equal(t, http.StatusOK, code, "the address serve printed")
	code, _ = get("dash.example.com:8089")
	require.Equal(t, http.StatusOK, code)

	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, "%s %s", out, errOut)
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop")
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// TestParkedShowBoundsTheBody stores a parked outbox row with a 7.3 MB JSON
// body and a parked message with a 6 MB binary body in the real database:
// parked show prints the first 4 KiB of each and says how many bytes it
// left out and how to get them; -full prints all of it; -out writes the
// body, byte for byte, to a new file.
func TestParkedShowBoundsTheBody(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t)
	vars := map[string]string{"TXMSG_DSN": dsn}
	require.Equal(t, exitOK, ctl(t, vars, "migrate").code)

	big := []byte(`{"order":"o-1","blob":"` + strings.Repeat("é0123456789", 7_300_000/12) + `","tail":"TAIL-OF-THE-BODY"}`)
	now := time.Now().UTC()
	id := txmsg.NewID()
	require.NoError(t, db.Table("txmsg_outbox").Create(&outbox.Row{MsgID: id, Topic: "orders", Body: big, Status: outbox.StatusParked,
		Attempts: 20, LastError: "message too large", NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}).Error)
	small := txmsg.NewID()
	require.NoError(t, db.Table("txmsg_outbox").Create(&outbox.Row{MsgID: small, Topic: "orders", Body: []byte(`{"order":"o-2"}`), Status: outbox.StatusParked,
		Attempts: 20, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}).Error)

	r := ctl(t, vars, "parked", "show", "-kind", "outbox", id)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Less(t, len(r.stdout), 8<<10, "the body is cut")
	require.Contains(t, r.stdout, "message too large")
	require.Contains(t, r.stdout, `{"order":"o-1","blob":"é0123456789`)
	require.NotContains(t, r.stdout, "TAIL-OF-THE-BODY")
	require.Contains(t, r.stdout, "-full")
	require.Contains(t, r.stdout, "-out")
	require.Regexp(t, `body \(`+strconv.Itoa(len(big))+` bytes`, r.stdout)
	require.Contains(t, r.stdout, " more bytes")
	require.NotContains(t, r.stdout, "\uFFFD", "cut between runes, not inside one")

	r = ctl(t, vars, "parked", "show", "-kind", "outbox", "-full", id)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, string(big))

	// Small bodies are shown whole, without a note.
	r = ctl(t, vars, "parked", "show", "-kind", "outbox", small)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `{"order":"o-2"}`)
	require.NotContains(t, r.stdout, "-full")

	out := filepath.Join(t.TempDir(), "body.json")
	r = ctl(t, vars, "parked", "show", "-kind", "outbox", "-out", out, id)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Less(t, len(r.stdout), 4<<10)
	require.Contains(t, r.stdout, out)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, got), "the file holds the body")
	r = ctl(t, vars, "parked", "show", "-kind", "outbox", "-out", out, id)
	require.Equal(t, exitError, r.code, "an existing file is not overwritten")
	require.Contains(t, r.stderr, "exists")
	r = ctl(t, vars, "parked", "show", "-kind", "outbox", "-out", out+"2", id, small)
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "one ID")
	r = ctl(t, vars, "parked", "show", "-kind", "outbox", "-out", out+"3", "-full", id)
	require.Equal(t, exitUsage, r.code, r)

	// A parked message with a binary body: base64 of its start only.
	inbox, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	bin := bytes.Repeat([]byte{0x00, 0xff, 0x10, 0x80}, 6_000_000/4)
	copy(bin[len(bin)-8:], "BINTAIL!")
	pid := txmsg.NewID()
	for _, group := range []string{"inventory", "billing"} {
		rec := &txmsg.Received{Message: &txmsg.Message{ID: pid, Topic: "orders", Body: bin}, Attempt: 1}
		require.NoError(t, driver.Park(inbox, ctx, group, rec, txmsg.ErrDecode))
	}
	r = ctl(t, vars, "parked", "show", "-kind", "consumer", pid)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Less(t, len(r.stdout), 16<<10, "two groups' copies, each cut")
	require.Contains(t, r.stdout, "base64")
	require.Contains(t, r.stdout, base64.StdEncoding.EncodeToString(bin[:3000]))
	require.Contains(t, r.stdout, " more bytes")
	r = ctl(t, vars, "parked", "show", "-kind", "consumer", "-group", "billing", "-full", pid)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, base64.StdEncoding.EncodeToString(bin))
	r = ctl(t, vars, "parked", "show", "-kind", "consumer", "-out", out+"4", pid)
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "-group")
	r = ctl(t, vars, "parked", "show", "-kind", "consumer", "-group", "inventory", "-out", out+"5", pid)
	require.Equal(t, exitOK, r.code, r.stderr)
	got, err = os.ReadFile(out + "5")
	require.NoError(t, err)
	require.True(t, bytes.Equal(bin, got))
}

package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// A message whose handler fails twice is listed by txmsgctl failing with
// its failures and error, shown whole by ID, and purged by txmsgctl purge
// once its last failure is older than -failing-older-than.
func TestFailingListsShowsAndPurges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testbed.DBWithDSN(t)
	vars := map[string]string{"TXMSG_DSN": dsn}
	require.Equal(t, exitOK, ctl(t, vars, "migrate").code)
	in, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	route := txmsg.Handle(txmsg.Topic[map[string]any]{Name: "orders"}, func(context.Context, *gorm.DB, txmsg.Delivery[map[string]any]) error {
		return errors.New("inventory service answered 503")
	})
	id := txmsg.NewID()
	rec := &txmsg.Received{Message: &txmsg.Message{ID: id, Topic: "orders", Keys: []string{"order-9"}, Body: []byte(`{"order":"o-9"}`)}, Attempt: 1}
	for attempt := 1; attempt <= 2; attempt++ {
		rec.Attempt = attempt
		_, err := driver.Process(route, ctx, in, "billing", rec)
		require.Error(t, err)
	}

	r := ctl(t, vars, "failing")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, id)
	require.Regexp(t, `billing\s+orders\s+retrying\s+2\s+2\s`, r.stdout)
	require.Contains(t, r.stdout, "inventory service answered 503")
	require.Contains(t, r.stdout, "(1 failing message(s) shown)")
	r = ctl(t, vars, "failing", "-group", "other")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "(0 failing message(s) shown)")

	r = ctl(t, vars, "stats")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `failing\s+txmsg_inbox_failing\s+total\s+1\s+group billing\s+1`, r.stdout)

	r = ctl(t, vars, "failing", id)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `{"order":"o-9"}`)
	require.Contains(t, r.stdout, "order-9")
	require.Equal(t, exitError, ctl(t, vars, "failing", "no-such-id").code)

	r = ctl(t, vars, "purge", "-failing-older-than", "1h")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `failing messages\s+txmsg_inbox_failing: deleted 0`, r.stdout)
	r = ctl(t, vars, "purge", "-failing-older-than", "0s")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.True(t, strings.Contains(r.stdout, "txmsg_inbox_failing: deleted 1"), r.stdout)
}

package txmsg_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// inbox.sql, shipped for DBAs, must create what Inbox.Migrate creates.
func TestInboxSQLMatchesMigrate(t *testing.T) {
	t.Parallel()
	migrated, fromFile := testbed.DB(t), testbed.DB(t)
	in, err := txmsg.NewInbox(migrated, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, in.Migrate(context.Background()))
	testbed.ExecSQLFile(t, fromFile, "inbox.sql")
	for _, table := range []string{txmsg.DefaultInboxTable, txmsg.DefaultParkedTable, txmsg.DefaultFailingTable} {
		require.Equal(t, testbed.Shape(t, migrated, table), testbed.Shape(t, fromFile, table), table)
	}
}

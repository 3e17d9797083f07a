package txmsg_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

// keyedEffect has a unique key: a handler that writes one twice fails with
// a duplicate-key error of its own.
type keyedEffect struct {
	MsgID string `gorm:"primaryKey;size:64"`
}

// A redelivered copy that the inbox drops is not logged as an error through
// the caller's gorm logger; a handler's own failing statement and a real
// failure of the inbox still are.
func TestInboxExpectedPathsNotLoggedAsErrors(t *testing.T) {
	t.Parallel()
	base := testbed.DB(t)
	db, rec := testbed.WithGormErrors(base)
	in, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, in.Migrate(ctx))
	require.NoError(t, base.AutoMigrate(&keyedEffect{}))
	write := func(ctx context.Context, tx *gorm.DB) error { return tx.Create(&keyedEffect{MsgID: "e1"}).Error }

	id := txmsg.NewID()
	for range 3 {
		_, err := driver.Run(in, ctx, "g", "events", id, write)
		require.NoError(t, err)
	}
	require.Empty(t, rec.All(), "a redelivered copy")

	// The handler's own duplicate is the caller's error: logged.
	_, err = driver.Run(in, ctx, "g", "events", txmsg.NewID(), write)
	require.Error(t, err)
	require.Len(t, rec.Containing("Duplicate entry"), 1, rec.All())

	// A real failure of the inbox's own statement: logged.
	broken, err := txmsg.NewInbox(db, txmsg.InboxConfig{Table: "no_such_inbox"})
	require.NoError(t, err)
	_, err = driver.Run(broken, ctx, "g", "events", txmsg.NewID(), write)
	require.Error(t, err)
	require.Len(t, rec.Containing("no_such_inbox"), 1, rec.All())
}

package txmsg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

func failingRows(t *testing.T, in *txmsg.Inbox, f txmsg.FailingFilter) []txmsg.FailingRow {
	t.Helper()
	rows, err := in.Failing(context.Background(), f)
	require.NoError(t, err)
	return rows
}

// A handler that errs and panics on one message leaves one row with its
// attempts, first and last failure and last error; the row goes once a
// later delivery is handled, and the handler's writes of failed attempts
// were rolled back.
func TestFailingRecordedUntilHandled(t *testing.T) {
	t.Parallel()
	in, db := newInbox(t)
	ctx := context.Background()
	fail := 3
	route := txmsg.Handle(txmsg.Topic[event]{Name: "events"}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[event]) error {
		if err := tx.Create(&effect{MsgID: d.Message.ID, N: d.Attempt}).Error; err != nil {
			return err
		}
		switch {
		case d.Attempt == fail:
			panic("boom on the third attempt")
		case d.Attempt < fail:
			return fmt.Errorf("payment service refused %s (attempt %d)", d.Message.ID, d.Attempt)
		}
		return nil
	})
	pad := strings.Repeat("x", txmsg.MaxFailingBody+100)
	rec := received("m1", `{"n":7,"pad":"`+pad+`"}`)
	rec.Message.Tag, rec.Message.Keys = "created", []string{"order-1", "order-2"}
	for attempt := 1; attempt <= fail; attempt++ {
		rec.Attempt = attempt
		_, err := driver.Process(route, ctx, in, "g1", rec)
		require.Error(t, err)
	}
	// Another group's failure of the same message is a row of its own.
	rec.Attempt = 1
	_, err := driver.Process(route, ctx, in, "g2", rec)
	require.Error(t, err)

	rows := failingRows(t, in, txmsg.FailingFilter{Group: "g1"})
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, "m1", r.MsgID)
	require.Equal(t, "events", r.Topic)
	require.Equal(t, "created", r.Tag)
	require.Equal(t, "order-1 order-2", r.Keys)
	require.Equal(t, "b-m1", r.BrokerMessageID)
	require.Equal(t, 3, r.Failures)
	require.Equal(t, 3, r.Attempt)
	require.Contains(t, r.Error, "boom on the third attempt")
	require.False(t, r.DeadLettered)
	require.True(t, r.BodyTruncated())
	require.Len(t, r.Body, txmsg.MaxFailingBody)
	require.Equal(t, len(rec.Message.Body), r.BodySize)
	require.True(t, r.LastFailedAt.After(r.FirstFailedAt), "first %v, last %v", r.FirstFailedAt, r.LastFailedAt)
	_, err = r.Message()
	require.ErrorIs(t, err, txmsg.ErrInvalidMessage, "a cut body cannot be sent again")

	counts, err := in.FailingByGroup(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"g1": 1, "g2": 1}, counts)

	// The fourth delivery is handled: g1's row goes, g2's stays.
	rec.Attempt = 4
	out, err := driver.Process(route, ctx, in, "g1", rec)
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeHandled, out)
	require.Empty(t, failingRows(t, in, txmsg.FailingFilter{Group: "g1"}))
	require.Len(t, failingRows(t, in, txmsg.FailingFilter{}), 1)
	var effects int64
	require.NoError(t, db.Model(&effect{}).Where("msg_id = ?", "m1").Count(&effects).Error)
	require.EqualValues(t, 1, effects, "failed attempts rolled back")

	// g2's message turns out handled already (a duplicate): its row goes.
	require.NoError(t, db.Table(txmsg.DefaultInboxTable).Create(&txmsg.InboxRow{ConsumerGroup: "g2", MsgID: "m1", Topic: "events", HandledAt: time.Now().UTC()}).Error)
	rec.Attempt = 2
	out, err = driver.Process(route, ctx, in, "g2", rec)
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeDuplicate, out)
	require.Empty(t, failingRows(t, in, txmsg.FailingFilter{}))
}

// The final attempt marks the row dead-lettered; a message parked after
// its last failure (an ordered consumer) loses its row; a failure while
// the consumer's context is cancelled (Close) is not recorded; long errors
// are cut.
func TestFailingFinalParkedAndCancelled(t *testing.T) {
	t.Parallel()
	in, _ := newInbox(t)
	ctx := context.Background()
	long := strings.Repeat("é", txmsg.MaxFailingError) // 2 bytes each
	route := txmsg.Handle(txmsg.Topic[event]{Name: "events"}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[event]) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New(long)
	})
	dead := received("dead", `{"n":1}`)
	dead.Attempt, dead.Final = 17, true
	dead.Message.Properties = map[string]string{"tenant": "acme", txmsg.PropertyID: "dead"}
	_, err := driver.Process(route, ctx, in, "g", dead)
	require.Error(t, err)
	rows := failingRows(t, in, txmsg.FailingFilter{IDs: []string{"dead"}})
	require.Len(t, rows, 1)
	require.True(t, rows[0].DeadLettered)
	require.False(t, rows[0].BodyTruncated())
	require.LessOrEqual(t, len(rows[0].Error), txmsg.MaxFailingError)
	require.True(t, strings.HasPrefix(long, rows[0].Error), "cut at a character boundary")
	m, err := rows[0].Message()
	require.NoError(t, err)
	require.Equal(t, "dead", m.ID)
	require.Equal(t, "events", m.Topic)
	require.Equal(t, `{"n":1}`, string(m.Body))
	require.Equal(t, map[string]string{"tenant": "acme"}, m.Properties, "reserved properties left out")

	parked := received("parked", `{"n":1}`)
	_, err = driver.Process(route, ctx, in, "g", parked)
	require.Error(t, err)
	require.Len(t, failingRows(t, in, txmsg.FailingFilter{IDs: []string{"parked"}}), 1)
	parked.Attempt = 2
	require.NoError(t, driver.ParkFailed(in, ctx, "g", parked, errors.New("gave up")))
	require.Empty(t, failingRows(t, in, txmsg.FailingFilter{IDs: []string{"parked"}}))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = driver.Process(route, cctx, in, "g", received("closing", `{"n":1}`))
	require.Error(t, err)
	require.Empty(t, failingRows(t, in, txmsg.FailingFilter{IDs: []string{"closing"}}))
}

// The table is bounded by the messages failing now: rows of handled
// messages go as they are handled, and PurgeFailing removes those the
// broker gave up on by the age of their last failure.
func TestFailingTableBoundedAndPurged(t *testing.T) {
	t.Parallel()
	in, db := newInbox(t)
	ctx := context.Background()
	failing := map[string]bool{}
	route := txmsg.Handle(txmsg.Topic[event]{Name: "events"}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[event]) error {
		if failing[d.Message.ID] {
			return errors.New("still failing")
		}
		return nil
	})
	const n = 40
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		failing[id] = true
		rec := received(id, `{"n":1}`)
		_, err := driver.Process(route, ctx, in, "g", rec)
		require.Error(t, err)
		if i%4 != 0 { // three in four recover on their redelivery
			failing[id] = false
			rec.Attempt = 2
			_, err = driver.Process(route, ctx, in, "g", rec)
			require.NoError(t, err)
		}
	}
	rows := failingRows(t, in, txmsg.FailingFilter{})
	require.Len(t, rows, n/4, "only the messages still failing")
	page := failingRows(t, in, txmsg.FailingFilter{Limit: 3})
	require.Len(t, page, 3)
	require.Len(t, failingRows(t, in, txmsg.FailingFilter{AfterID: page[2].ID}), n/4-3)
	_, err := in.Failing(ctx, txmsg.FailingFilter{Limit: -1})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)

	// Half of them last failed two days ago: the purge takes those.
	old := []string{rows[0].MsgID, rows[1].MsgID, rows[2].MsgID, rows[3].MsgID, rows[4].MsgID}
	require.NoError(t, db.Table(in.FailingTable()).Where("msg_id IN ?", old).
		Update("last_failed_at", time.Now().UTC().Add(-48*time.Hour)).Error)
	purged, err := in.PurgeFailing(ctx, 24*time.Hour, 2, "")
	require.NoError(t, err)
	require.EqualValues(t, len(old), purged)
	require.Len(t, failingRows(t, in, txmsg.FailingFilter{}), n/4-len(old))
	_, err = in.PurgeFailing(ctx, -time.Second, 0, "")
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	deleted, err := in.DeleteFailing(ctx, "g", rows[5].MsgID)
	require.NoError(t, err)
	require.EqualValues(t, 1, deleted)
	purged, err = in.PurgeFailing(ctx, 0, 0, "g")
	require.NoError(t, err)
	require.EqualValues(t, n/4-len(old)-1, purged)
	require.Empty(t, failingRows(t, in, txmsg.FailingFilter{}))
}

package txmsg_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
	"github.com/txmsg/txmsg/txmsg/driver"
)

type effect struct {
	ID    int64  `gorm:"primaryKey;autoIncrement"`
	MsgID string `gorm:"size:64"`
	N     int
}

func newInbox(t *testing.T, opts ...testbed.DBOption) (*txmsg.Inbox, *gorm.DB) {
	t.Helper()
	db := testbed.DB(t, opts...)
	in, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
	require.NoError(t, err)
	require.NoError(t, in.Migrate(context.Background()))
	require.NoError(t, db.AutoMigrate(&effect{}))
	return in, db
}

func received(id string, body string) *txmsg.Received {
	return &txmsg.Received{Message: &txmsg.Message{ID: id, Topic: "events", Body: []byte(body)}, BrokerMessageID: "b-" + id, Attempt: 1}
}

func TestInboxRunsEachMessageOnce(t *testing.T) {
	t.Parallel()
	in, db := newInbox(t)
	var runs atomic.Int32
	route := txmsg.Handle(txmsg.Topic[event]{Name: "events"}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[event]) error {
		runs.Add(1)
		return tx.Create(&effect{MsgID: d.Message.ID, N: d.Event.N}).Error
	})
	id := txmsg.NewID()
	// Concurrent duplicates race for the same inbox key.
	var wg sync.WaitGroup
	outcomes := make([]txmsg.Outcome, 5)
	for i := range outcomes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o, err := driver.Process(route, context.Background(), in, "g1", received(id, `{"n":5}`))
			require.NoError(t, err)
			outcomes[i] = o
		}(i)
	}
	wg.Wait()
	handled := 0
	for _, o := range outcomes {
		if o == txmsg.OutcomeHandled {
			handled++
		} else {
			require.Equal(t, txmsg.OutcomeDuplicate, o)
		}
	}
	require.Equal(t, 1, handled)
	require.EqualValues(t, 1, runs.Load())
	var n int64
	require.NoError(t, db.Model(&effect{}).Count(&n).Error)
	require.EqualValues(t, 1, n)

	// Another group handles the same message independently.
	o, err := driver.Process(route, context.Background(), in, "g2", received(id, `{"n":5}`))
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeHandled, o)
}

func TestInboxHandlerErrorAndPanicRollBack(t *testing.T) {
	t.Parallel()
	in, db := newInbox(t)
	boom := errors.New("boom")
	var mode atomic.Int32 // 0 error, 1 panic, 2 ok
	route := txmsg.Handle(txmsg.Topic[event]{Name: "events"}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[event]) error {
		if err := tx.Create(&effect{MsgID: d.Message.ID}).Error; err != nil {
			return err
		}
		switch mode.Load() {
		case 0:
			return boom
		case 1:
			panic("handler exploded")
		}
		return nil
	})
	id := txmsg.NewID()
	_, err := driver.Process(route, context.Background(), in, "g", received(id, `{}`))
	require.ErrorIs(t, err, boom)
	mode.Store(1)
	_, err = driver.Process(route, context.Background(), in, "g", received(id, `{}`))
	var pe *txmsg.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "handler exploded", pe.Value)

	var n int64
	require.NoError(t, db.Model(&effect{}).Count(&n).Error)
	require.Zero(t, n, "failed attempts leave no effect")

	mode.Store(2)
	o, err := driver.Process(route, context.Background(), in, "g", received(id, `{}`))
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeHandled, o)
	require.NoError(t, db.Model(&effect{}).Count(&n).Error)
	require.EqualValues(t, 1, n)
}

func TestInboxParksUndecodableBodyOnce(t *testing.T) {
	t.Parallel()
	in, db := newInbox(t)
	ran := false
	route := txmsg.Handle(txmsg.Topic[event]{Name: "events"}, func(context.Context, *gorm.DB, txmsg.Delivery[event]) error {
		ran = true
		return nil
	})
	id := txmsg.NewID()
	for i := 0; i < 2; i++ {
		o, err := driver.Process(route, context.Background(), in, "g", received(id, "\xff not json"))
		require.NoError(t, err)
		require.Equal(t, txmsg.OutcomeParked, o)
	}
	require.False(t, ran)
	_, parkedTable := in.Tables()
	var rows []txmsg.ParkedRow
	require.NoError(t, db.Table(parkedTable).Find(&rows).Error)
	require.Len(t, rows, 1)
	require.Equal(t, []byte("\xff not json"), rows[0].Body)
	require.Equal(t, id, rows[0].MsgID)
	require.Contains(t, rows[0].Error, "decode")
}

func TestNewInboxValidates(t *testing.T) {
	t.Parallel()
	_, err := txmsg.NewInbox(nil, txmsg.InboxConfig{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	_, err = txmsg.NewInbox(&gorm.DB{}, txmsg.InboxConfig{Table: "x y"})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.Error(t, txmsg.Route{}.Validate())
}

// Deliveries whose IDs (or consumer groups) differ only in case are
// different messages, whatever the database's default collation: each runs
// the handler, and each parks on its own.
func TestInboxIDsDifferingInCaseAreDistinct(t *testing.T) {
	t.Parallel()
	in, db := newInbox(t, testbed.ServerDefaults())
	ctx := context.Background()
	var runs atomic.Int32
	route := txmsg.Handle(txmsg.Topic[event]{Name: "events"}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[event]) error {
		runs.Add(1)
		return tx.Create(&effect{MsgID: d.Message.ID, N: d.Event.N}).Error
	})
	upper := "Order-" + testbed.Suffix()
	lower := strings.ToLower(upper)
	for _, id := range []string{upper, lower} {
		o, err := driver.Process(route, ctx, in, "g", received(id, `{"n":1}`))
		require.NoError(t, err, id)
		require.Equal(t, txmsg.OutcomeHandled, o, id)
	}
	o, err := driver.Process(route, ctx, in, "G", received(lower, `{"n":1}`))
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeHandled, o, "consumer group G is not group g")
	o, err = driver.Process(route, ctx, in, "g", received(lower, `{"n":1}`))
	require.NoError(t, err)
	require.Equal(t, txmsg.OutcomeDuplicate, o, "the same ID in the same group is still a duplicate")
	require.EqualValues(t, 3, runs.Load())
	var effects []string
	require.NoError(t, db.Model(&effect{}).Order("id").Pluck("msg_id", &effects).Error)
	require.Equal(t, []string{upper, lower, lower}, effects)

	for _, id := range []string{upper + "-bad", lower + "-bad"} {
		o, err := driver.Process(route, ctx, in, "g", received(id, "not json"))
		require.NoError(t, err, id)
		require.Equal(t, txmsg.OutcomeParked, o, id)
	}
	_, parkedTable := in.Tables()
	var parked []string
	require.NoError(t, db.Table(parkedTable).Order("id").Pluck("msg_id", &parked).Error)
	require.Equal(t, []string{upper + "-bad", lower + "-bad"}, parked)
}

// TestInboxPurgeRefusesAgesInsideRedeliverySpan: an inbox row younger than
// the broker's redelivery span may still meet a redelivery of its message;
// purging it would run the handler twice. Purge refuses such ages and
// deletes nothing; from MinInboxPurgeAge on it deletes only older rows.
func TestInboxPurgeRefusesAgesInsideRedeliverySpan(t *testing.T) {
	t.Parallel()
	in, db := newInbox(t)
	ctx := context.Background()
	table, _ := in.Tables()
	noop := func(context.Context, *gorm.DB) error { return nil }
	ids := []string{txmsg.NewID(), txmsg.NewID(), txmsg.NewID()}
	for _, id := range ids {
		_, err := driver.Run(in, ctx, "g", "events", id, noop)
		require.NoError(t, err)
	}
	count := func() int64 {
		var n int64
		require.NoError(t, db.Table(table).Count(&n).Error)
		return n
	}
	// Two rows handled two hours ago: inside the span, they must stay.
	require.NoError(t, db.Table(table).Where("msg_id IN ?", ids[:2]).
		Update("handled_at", time.Now().UTC().Add(-2*time.Hour)).Error)
	for _, age := range []time.Duration{time.Hour, time.Minute, 0, -time.Hour, txmsg.MinInboxPurgeAge - time.Second} {
		n, err := in.Purge(ctx, age, 0)
		require.ErrorIs(t, err, txmsg.ErrPurgeTooYoung, "age %s", age)
		require.Zero(t, n)
	}
	require.EqualValues(t, 3, count(), "a refused purge deletes nothing")

	require.NoError(t, db.Table(table).Where("msg_id = ?", ids[0]).
		Update("handled_at", time.Now().UTC().Add(-txmsg.MinInboxPurgeAge-time.Hour)).Error)
	n, err := in.Purge(ctx, txmsg.MinInboxPurgeAge, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.EqualValues(t, 2, count())
}

// NewInbox refuses a handle whose DSN lacks parseTime=true, whether gorm
// knows the DSN or was given a *sql.DB; one with it is taken.
func TestNewInboxRefusesDSNWithoutParseTime(t *testing.T) {
	t.Parallel()
	_, dsn := testbed.DBWithDSN(t)
	for name, db := range testbed.WithoutParseTime(t, dsn) {
		_, err := txmsg.NewInbox(db, txmsg.InboxConfig{})
		require.ErrorIs(t, err, txmsg.ErrInvalidConfig, name)
		require.ErrorContains(t, err, "parseTime=true", name)
	}
	_, err := txmsg.NewInbox(testbed.OverConn(t, dsn), txmsg.InboxConfig{})
	require.NoError(t, err)
}

// TestInboxConfigDefaultsThenValidate: WithDefaults then Validate accepts
// the zero config; Validate alone refuses it and names the field.
func TestInboxConfigDefaultsThenValidate(t *testing.T) {
	require.NoError(t, txmsg.InboxConfig{}.WithDefaults().Validate())
	err := txmsg.InboxConfig{}.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Table")
	cfg := txmsg.InboxConfig{ParkedTable: "x;y"}.WithDefaults()
	require.Equal(t, txmsg.DefaultInboxTable, cfg.Table)
	err = cfg.Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "ParkedTable")
	err = txmsg.InboxConfig{Hooks: txmsg.Hooks{struct{}{}}}.WithDefaults().Validate()
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "Hooks")
}

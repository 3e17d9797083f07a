package outbox

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/store"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// TestLiteralInsertMatchesGorm writes the same messages once through the
// literal INSERT (the default DSN) and once through gorm with arguments
// (the same database opened with interpolateParams=true, where literals
// are not used) and compares every column of the rows.
func TestLiteralInsertMatchesGorm(t *testing.T) {
	e := newEnv(t, Config{})
	_, ok := store.LiteralsFor(e.db)
	require.True(t, ok, "the test DSN takes the literal path")
	cfg, err := mysql.ParseDSN(e.dsn)
	require.NoError(t, err)
	cfg.InterpolateParams = true
	gdb, err := testbed.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := gdb.DB(); err == nil {
			_ = s.Close()
		}
	})
	_, ok = store.LiteralsFor(gdb)
	require.False(t, ok)
	viaGorm, err := New(gdb, Config{})
	require.NoError(t, err)

	mk := func(suffix string) []*txmsg.Message {
		return []*txmsg.Message{
			{ID: "a-" + suffix, Topic: e.topic, Body: []byte("plain")},
			{ID: "b-" + suffix, Topic: e.topic, Tag: "t'ag", Keys: []string{"k1", "k'2"}, ShardingKey: "sk\\1",
				Body: []byte{0, 1, '\'', '\\', 0xff}, Properties: map[string]string{"p": "v'\"?", "ü": "日本"}},
			{ID: "c-" + suffix, Topic: e.topic, Body: []byte(`{"json":true}`), Tag: "é"},
		}
	}
	for _, c := range []struct {
		db *gorm.DB
		ob *Outbox
		s  string
	}{{e.db, e.ob, "lit"}, {gdb, viaGorm, "gorm"}} {
		msgs := mk(c.s)
		require.NoError(t, c.db.Transaction(func(tx *gorm.DB) error { return c.ob.EnqueueTx(context.Background(), tx, msgs...) }))
	}
	rows := e.rows("")
	require.Len(t, rows, 6)
	byID := map[string]Row{}
	for _, r := range rows {
		byID[r.MsgID] = r
	}
	for _, id := range []string{"a", "b", "c"} {
		l, g := byID[id+"-lit"], byID[id+"-gorm"]
		require.NotZero(t, l.ID)
		require.NotZero(t, g.ID)
		// Only the keys and the times differ.
		require.WithinDuration(t, g.CreatedAt, l.CreatedAt, time.Minute)
		require.WithinDuration(t, l.CreatedAt, l.NextAttemptAt, 0)
		require.WithinDuration(t, l.CreatedAt, l.UpdatedAt, 0)
		l.ID, g.ID, l.MsgID, g.MsgID = 0, 0, "", ""
		l.CreatedAt, g.CreatedAt, l.NextAttemptAt, g.NextAttemptAt, l.UpdatedAt, g.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if l.ShardingKey == "" {
			// Rows without a sharding key get a random bucket.
			l.Bucket, g.Bucket = 0, 0
		}
		require.Equal(t, g, l, id)
	}
	// A duplicate ID is still reported as one on the literal path.
	_, err = e.ob.Transact(context.Background(), &txmsg.Message{ID: "a-lit", Topic: e.topic, Body: []byte("x")},
		func(context.Context, *gorm.DB) error { return nil })
	require.ErrorIs(t, err, txmsg.ErrDuplicateID)
}

// BenchmarkOutboxInsert compares, inside one open transaction on the real
// database, the outbox row insert through gorm with arguments (prepare,
// execute, close), through the literal INSERT (one query), and through
// plain database/sql with arguments, to show gorm's own overhead. Run with
// the services up: go test -run '^$' -bench OutboxInsert ./adapters/outbox/
func BenchmarkOutboxInsert(b *testing.B) {
	db := testbed.DB(b)
	ob, err := New(db, Config{})
	require.NoError(b, err)
	require.NoError(b, ob.Migrate(context.Background()))
	msg := func(i int) []*Row {
		m := &txmsg.Message{ID: fmt.Sprintf("bench-%d-%s", i, txmsg.NewID()), Topic: "bench",
			Body: []byte(`{"order_no":"0193a5b2-7c1d-7e8f-9a0b-1c2d3e4f5a6b","customer_id":4711,"sku":"SKU-004711","qty":3,"amount_cents":2710,"created_at":"2026-12-01T15:00:00Z"}`)}
		r, err := newRow(m, ob.cfg.Buckets, time.Now().UTC())
		require.NoError(b, err)
		r.MsgID = m.ID
		return []*Row{r}
	}
	run := func(b *testing.B, insert func(tx *gorm.DB, rows []*Row) error) {
		tx := db.Begin()
		require.NoError(b, tx.Error)
		defer tx.Rollback()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := insert(tx, msg(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("gorm-args", func(b *testing.B) {
		run(b, func(tx *gorm.DB, rows []*Row) error { return tx.Table(ob.cfg.Table).Create(&rows).Error })
	})
	b.Run("gorm-literal", func(b *testing.B) {
		run(b, func(tx *gorm.DB, rows []*Row) error { return ob.insertChunk(context.Background(), tx, rows) })
	})
	b.Run("database-sql-args", func(b *testing.B) {
		const q = "INSERT INTO `txmsg_outbox` (`msg_id`,`topic`,`tag`,`keys`,`sharding_key`,`bucket`,`body`,`properties`,`status`," +
			"`attempts`,`next_attempt_at`,`last_error`,`created_at`,`updated_at`,`sent_at`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
		run(b, func(tx *gorm.DB, rows []*Row) error {
			r := rows[0]
			_, err := tx.Statement.ConnPool.ExecContext(context.Background(), q, r.MsgID, r.Topic, r.Tag, r.Keys, r.ShardingKey, r.Bucket,
				r.Body, r.Properties, string(r.Status), r.Attempts, r.NextAttemptAt, r.LastError, r.CreatedAt, r.UpdatedAt, r.SentAt)
			return err
		})
	})
	b.Run("database-sql-literal", func(b *testing.B) {
		lit, ok := store.LiteralsFor(db)
		require.True(b, ok)
		run(b, func(tx *gorm.DB, rows []*Row) error {
			q, _ := ob.literalInsert(lit, rows, false)
			_, err := tx.Statement.ConnPool.ExecContext(context.Background(), q)
			return err
		})
	})
}

// TestRelayStatementsGoAsLiterals: on a handle that takes literals, the
// relay's claims, body loads and marks on the outbox table go without
// arguments, unordered and ordered, for rows published, failed and
// parked, and the rows end as they should.
func TestRelayStatementsGoAsLiterals(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			e := newEnv(t, Config{})
			var mu sync.Mutex
			var recording bool
			var withArgs, locking []string
			var literal int
			record := func(d *gorm.DB) {
				mu.Lock()
				defer mu.Unlock()
				q := d.Statement.SQL.String()
				if !recording || d.DryRun || !strings.Contains(q, "`"+e.ob.cfg.Table+"`") {
					return
				}
				if len(d.Statement.Vars) > 0 {
					withArgs = append(withArgs, q)
				} else {
					literal++
				}
				if strings.Contains(q, "FOR UPDATE") {
					locking = append(locking, q)
				}
			}
			require.NoError(t, e.db.Callback().Query().After("gorm:query").Register("test:literal", record))
			require.NoError(t, e.db.Callback().Raw().After("gorm:raw").Register("test:literal", record))
			require.NoError(t, e.db.Callback().Update().After("gorm:update").Register("test:literal", record))

			e.enqueue(40, func(i int) *txmsg.Message {
				m := e.msg(fmt.Sprintf("m%d", i), withKey(fmt.Sprintf("k%d", i%4)))
				m.ID = fmt.Sprintf("lit-%d", i)
				if i%10 == 9 {
					m.Tag = "park"
				}
				return m
			})
			pub := newMemPublisher()
			pub.setFail(func(m *txmsg.Message) error {
				if m.Tag == "park" {
					return fmt.Errorf("%w: refused: tag %q", txmsg.ErrRejected, m.Tag)
				}
				return nil
			})
			mu.Lock()
			recording = true
			mu.Unlock()
			// Retention < 0: no purge, which runs once a minute, not per cycle.
			r := e.relay(pub, RelayConfig{Ordered: ordered, BatchSize: 7, MaxAttempts: 2, Retention: -1})
			start(t, r)
			require.Eventually(t, func() bool { s := e.stats(); return s.Sent == 36 && s.Parked == 4 }, waitFor, tick)
			mu.Lock()
			recording = false
			args, lits, locks := withArgs, literal, locking
			mu.Unlock()
			require.Empty(t, args, "statements on the outbox table sent with arguments")
			require.Greater(t, lits, 10, "literal statements on the outbox table")
			require.NotEmpty(t, locks)
			if !ordered {
				// The unordered claim locks the rows it found by primary
				// key, never a range (see claimIn).
				for _, q := range locks {
					require.Contains(t, q, "WHERE id IN (", q)
					require.Contains(t, q, "SKIP LOCKED", q)
				}
			}
			require.Equal(t, 36, pub.distinct())
			for _, row := range e.rows("status = ?", StatusParked) {
				require.Equal(t, 2, row.Attempts)
				require.Contains(t, row.LastError, `refused: tag "park"`)
			}
		})
	}
}

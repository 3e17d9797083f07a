package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
)

// TestRelayMarksAfterFailedClaim: the claim transaction fails after its
// batch was published, before it is marked: InnoDB picks it as a deadlock
// victim, or its connection is killed. The relay marks the rows in a new
// transaction before it claims again: every row ends sent and was
// published once, and a row the broker refused counts its one attempt.
// Before, the rows stayed pending and the next claim published them
// again.
func TestRelayMarksAfterFailedClaim(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		for _, how := range []string{"deadlock", "killed"} {
			t.Run(fmt.Sprintf("%s/ordered=%v", how, ordered), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, Config{})
				require.NoError(t, e.db.Exec("CREATE TABLE scratch_lock (n INT PRIMARY KEY)").Error)
				require.NoError(t, e.db.Exec("INSERT INTO scratch_lock VALUES (1), (2)").Error)
				require.NoError(t, e.db.Exec("CREATE TABLE scratch_heavy (n INT NOT NULL)").Error)
				require.NoError(t, e.db.Exec("CREATE TABLE scratch_ten (n INT NOT NULL)").Error)
				require.NoError(t, e.db.Exec("INSERT INTO scratch_ten VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)").Error)

				pub := newMemPublisher()
				var refused atomic.Bool
				pub.setFail(func(m *txmsg.Message) error {
					if string(m.Body) == "bad-0" && refused.CompareAndSwap(false, true) {
						return fmt.Errorf("%w: refused once", txmsg.ErrRejected)
					}
					return nil
				})
				cfg := RelayConfig{Name: "r", MaxAttempts: -1}
				if ordered {
					cfg = orderedConfig("r")
				}
				r := e.relay(pub, cfg)
				var fired atomic.Bool
				var got atomic.Pointer[error]
				r.beforeMark = func(ctx context.Context, tx *gorm.DB) error {
					if !fired.CompareAndSwap(false, true) {
						return nil
					}
					var err error
					if how == "deadlock" {
						err = e.deadlockVictim(tx)
					} else {
						err = e.killConnection(tx)
					}
					got.Store(&err)
					return err
				}
				ids := append(e.send(3, "a", withKey("a")), e.send(3, "b", withKey("b"))...)
				ids = append(ids, e.send(1, "bad", withKey("bad"))...)
				start(t, r)

				require.Eventually(t, func() bool { return e.stats().Sent == int64(len(ids)) }, waitFor, tick)
				require.True(t, fired.Load(), "the claim was made to fail")
				if how == "deadlock" {
					var me *mysql.MySQLError
					require.True(t, errors.As(*got.Load(), &me) && me.Number == 1213,
						"InnoDB chose the relay's transaction as the deadlock victim: %v", *got.Load())
				}
				for _, id := range ids {
					require.Equal(t, 1, pub.times(id), "published once: %s", id)
				}
				require.EqualValues(t, 1, r.remarked.Load(), "the marks were applied after the claim failed")
				bad := e.rows("msg_id = ?", ids[len(ids)-1])
				require.Len(t, bad, 1)
				require.Equal(t, 1, bad[0].Attempts, "the refusal of the failed claim counts once")
			})
		}
	}
}

// deadlockVictim makes InnoDB roll tx back as a deadlock victim: tx and a
// transaction of a second connection each lock a row of scratch_lock and
// then ask for the other's. The second transaction has inserted rows, so
// it is the heavier one and InnoDB rolls tx back (it picks the transaction
// with the fewest changed rows and locks). It returns tx's error.
// It runs on the relay's goroutine: it reports a broken setup with
// t.Errorf, never FailNow.
func (e *env) deadlockVictim(tx *gorm.DB) error {
	other := e.db.Begin()
	defer other.Rollback()
	var n int64
	for _, err := range []error{
		other.Exec("INSERT INTO scratch_heavy (n) SELECT a.n FROM scratch_ten a, scratch_ten b, scratch_ten c, scratch_ten d").Error,
		other.Raw("SELECT n FROM scratch_lock WHERE n = 2 FOR UPDATE").Scan(&n).Error,
		tx.Raw("SELECT n FROM scratch_lock WHERE n = 1 FOR UPDATE").Scan(&n).Error,
	} {
		if err != nil {
			e.t.Errorf("deadlock setup: %v", err)
			return err
		}
	}
	done := make(chan error, 1)
	go func() {
		var m int64
		done <- other.Raw("SELECT n FROM scratch_lock WHERE n = 1 FOR UPDATE").Scan(&m).Error
	}()
	// Whichever of the two asks first waits; the other's ask closes the
	// cycle, and InnoDB rolls back the lighter transaction, tx.
	err := tx.Raw("SELECT n FROM scratch_lock WHERE n = 2 FOR UPDATE").Scan(&n).Error
	if oerr := <-done; oerr != nil {
		e.t.Errorf("the heavier transaction was rolled back instead: %v", oerr)
	}
	return err
}

// killConnection kills the connection of tx from another one; the marks
// then fail on a lost connection. It runs on the relay's goroutine.
func (e *env) killConnection(tx *gorm.DB) error {
	var id int64
	if err := tx.Raw("SELECT CONNECTION_ID()").Scan(&id).Error; err != nil {
		return err
	}
	if err := e.db.Exec(fmt.Sprintf("KILL CONNECTION %d", id)).Error; err != nil {
		e.t.Errorf("kill the relay's connection: %v", err)
		return err
	}
	// Until the server has closed it.
	for deadline := time.Now().Add(waitFor); time.Now().Before(deadline); time.Sleep(tick) {
		var n int64
		if err := e.db.Raw("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n).Error; err == nil && n == 0 {
			return nil
		}
	}
	e.t.Errorf("connection %d still open after KILL", id)
	return nil
}

// TestRemarkLeavesChangedRows: marks applied again after a failed claim
// change only the rows still as the claim read them. A row another relay
// marked meanwhile keeps that relay's marks, a row an operator requeued
// stays pending, a purged row stays gone, and the rest are marked; a
// second application changes nothing.
func TestRemarkLeavesChangedRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	ids := e.send(4, "g")
	claimed := e.rows("")
	require.Len(t, claimed, 4)
	rows := make([]*Row, len(claimed))
	for i := range claimed {
		rows[i] = &claimed[i]
	}
	r := e.relay(newMemPublisher(), RelayConfig{})
	plan := r.planMarks(rows, make([]error, len(rows)))
	require.Equal(t, 4, plan.sent)

	// Meanwhile: another relay published and marked row 0, an operator
	// requeued row 1 (as after it was parked), row 2 was deleted.
	later := time.Now().UTC().Add(time.Second).Truncate(time.Microsecond)
	require.NoError(t, e.db.Table(e.ob.Table()).Where("id = ?", rows[0].ID).
		Updates(map[string]any{"status": StatusSent, "sent_at": later, "updated_at": later}).Error)
	require.NoError(t, e.db.Table(e.ob.Table()).Where("id = ?", rows[1].ID).
		Updates(map[string]any{"status": StatusPending, "attempts": 0, "updated_at": later}).Error)
	require.NoError(t, e.db.Table(e.ob.Table()).Where("id = ?", rows[2].ID).Delete(map[string]any{}).Error)

	plan.since = time.Now()
	r.unmarked = plan
	require.NoError(t, r.remark(ctx))
	require.Nil(t, r.unmarked)

	got, err := e.ob.List(ctx, ListFilter{IDs: ids})
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, StatusSent, got[0].Status)
	require.True(t, later.Equal(*got[0].SentAt), "the other relay's mark stays")
	require.Equal(t, StatusPending, got[1].Status, "the requeued row stays pending")
	require.True(t, later.Equal(got[1].UpdatedAt))
	require.Equal(t, ids[3], got[2].MsgID)
	require.Equal(t, StatusSent, got[2].Status, "the unchanged row is marked")

	// Applied twice: the rows are no longer as claimed.
	var changed int64
	require.NoError(t, r.inTx(ctx, func(tx *gorm.DB) error {
		var err error
		changed, err = r.applyMarks(tx, plan, true)
		return err
	}))
	require.Zero(t, changed)
}

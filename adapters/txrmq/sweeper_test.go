package txrmq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// The database is unreachable for the check-back answerer for longer than
// the broker's whole check window, so the broker gives up on both half
// messages. After the database returns, the sweeper publishes the committed
// one exactly once and never the rolled-back one.
func TestSweeperRecoversPastTheCheckWindow(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	obs := testbed.Observe(t, e.topic, nil)

	proxy, cutChk := e.cuttableChecker(t)

	logger, logs := newLogRecorder()
	e.start(t, e.db, cutChk, logger)
	pub := newTestPublisher(t, 0)
	sw, err := NewSweeper(SweeperConfig{
		Config:          Config{NameServers: []string{testbed.NameServer()}, Group: testbed.Name(t, "sweep"), Logger: logger},
		ProducerGroups:  []string{e.group},
		HoldFor:         3 * time.Second,
		RetryDelayLevel: 1,
	}, cutChk, pub)
	require.NoError(t, err)
	require.NoError(t, sw.Start(context.Background()))
	t.Cleanup(func() { _ = sw.Close(context.Background()) })

	proxy.Cut()
	committed, abandoned := txmsg.NewID(), txmsg.NewID()
	runChild(t, e, "after-local-commit", committed)
	runChild(t, e, "after-half-send", abandoned)
	require.Equal(t, checker.StateCommitted, e.barrier(t, committed))
	require.Empty(t, e.barrier(t, abandoned))

	// Both half messages outlive the check window and reach the sweeper,
	// which cannot resolve them yet.
	require.Eventually(t, func() bool {
		return logs.countLines("barrier unreachable", committed) > 0 && logs.countLines("barrier unreachable", abandoned) > 0
	}, 90*time.Second, 100*time.Millisecond, "the broker did not discard the half messages; logs:\n%s", logs)
	require.Zero(t, obs.Count(committed))

	proxy.Restore()
	require.Eventually(t, func() bool { return obs.Count(committed) > 0 }, 60*time.Second, 50*time.Millisecond,
		"the committed event was not republished; logs:\n%s", logs)
	obs.DeliveredOnce(t, committed)
	require.Eventually(t, func() bool { return logs.countLines("rolled back; dropping", abandoned) > 0 }, 60*time.Second, 100*time.Millisecond)
	require.Equal(t, checker.StateRolledBack, e.barrier(t, abandoned))
	require.Zero(t, obs.Count(abandoned))
	got := obs.First(committed)
	require.Equal(t, e.topic, got.Topic)
	require.Equal(t, `{"from":"child"}`, string(got.Body))
}

type checkBackHook struct{}

func (checkBackHook) OnCheckBack(string, string, txmsg.LocalState, error, time.Duration) {}

func TestSweeperConfigValidation(t *testing.T) {
	t.Parallel()
	chk, err := checker.New(&gorm.DB{}, checker.Config{})
	require.NoError(t, err)
	base := Config{NameServers: []string{"127.0.0.1:9876"}, Group: "sweeper"}
	_, err = NewSweeper(SweeperConfig{Config: base}, chk, &Publisher{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig, "no producer groups")
	_, err = NewSweeper(SweeperConfig{Config: base, ProducerGroups: []string{"bad group"}}, chk, &Publisher{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	_, err = NewSweeper(SweeperConfig{Config: base, ProducerGroups: []string{"g"}}, nil, &Publisher{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	withHooks := base
	withHooks.Hooks = txmsg.Hooks{checkBackHook{}}
	_, err = NewSweeper(SweeperConfig{Config: withHooks, ProducerGroups: []string{"g"}}, chk, &Publisher{})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "sweeper: Hooks are not called here")
	_, err = NewPublisher(PublisherConfig{Config: withHooks})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorContains(t, err, "outbox.RelayConfig.Hooks")
}

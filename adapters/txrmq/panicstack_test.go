package txrmq_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
)

// recordHandler keeps every log record with its attributes, those given
// through With included.
type recordHandler struct {
	mu      *sync.Mutex
	records *[]map[string]any
	with    []slog.Attr
}

func newRecordHandler() *recordHandler {
	return &recordHandler{mu: new(sync.Mutex), records: new([]map[string]any)}
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	rec := map[string]any{"msg": r.Message, "level": r.Level}
	for _, a := range h.with {
		rec[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec[a.Key] = a.Value.Any()
		return true
	})
	h.mu.Lock()
	*h.records = append(*h.records, rec)
	h.mu.Unlock()
	return nil
}

func (h *recordHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.with = append(append([]slog.Attr(nil), h.with...), attrs...)
	return &c
}

func (h *recordHandler) WithGroup(string) slog.Handler { return h }

// panicked returns the records whose err is a *txmsg.PanicError.
func (h *recordHandler) panicked() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for _, r := range *h.records {
		err, _ := r["err"].(error)
		var pe *txmsg.PanicError
		if errors.As(err, &pe) {
			out = append(out, r)
		}
	}
	return out
}

// panickingHandler panics on a message's first attempt, in a function
// whose name the logged stack must show.
func panickingHandler(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[consumerEvent]) error {
	if d.Attempt == 1 {
		panic("handler exploded")
	}
	return nil
}

// A handler's panic is logged with its stack, by both consumers.
func TestConsumerLogsHandlerPanicStack(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		b := newConsumerBed(t)
		logs := newRecordHandler()
		route := txmsg.Handle(b.topicOf(), panickingHandler)
		if ordered {
			cfg := b.orderedConfig()
			cfg.Logger = slog.New(logs)
			b.startOrdered(cfg, b.inbox, route)
		} else {
			cfg := b.config()
			cfg.Logger = slog.New(logs)
			b.start(cfg, route)
		}
		m := b.message(consumerEvent{N: 1})
		b.publish(m)
		require.Eventually(t, func() bool { return b.handled(m.ID) }, consumerWait, consumerTick, "ordered=%v", ordered)

		recs := logs.panicked()
		require.NotEmpty(t, recs, "ordered=%v: the failed attempt is logged", ordered)
		for _, r := range recs {
			stack, _ := r["stack"].(string)
			require.True(t, strings.Contains(stack, "panickingHandler"), "ordered=%v: %q logged without the panic's stack: %v", ordered, r["msg"], r)
		}
	}
}

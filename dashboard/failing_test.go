package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

var resendBox = regexp.MustCompile(`<input type="checkbox" name="id" value="([^"]+)">`)

// TestFailingConsumerDeadLetterAndResend runs a consumer group whose
// handler fails on the real broker, next to the bed's own group on the
// same topic. A message that fails twice and then succeeds is in
// Inbox.Failing with its failures and error while it is retried, and gone
// once handled. A message that keeps failing uses its MaxReconsumeTimes
// and lands in %DLQ%<group>: the Consumers page shows its failures, its
// error and the dead-lettered message read from the broker. Resent from
// there, it reaches that group's handler, and not the other groups
// subscribed to the topic.
func TestFailingConsumerDeadLetterAndResend(t *testing.T) {
	t.Parallel()
	const token = "tok-5f1e0c77a2b9"
	b := dashtest.New(t, dashtest.Options{Broker: true, Token: token, AllowActions: true})
	ctx := context.Background()
	group := testbed.Name(t, "dfg")

	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	var seen []txmsg.FailingRow // the retried message's row, read by its third attempt
	handled := map[string]int{}
	route := txmsg.Handle(txmsg.Topic[dashtest.Event]{Name: b.Topic}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[dashtest.Event]) error {
		switch {
		case d.Event.Order == "o-retry" && d.Attempt < 3:
			return fmt.Errorf("stock service refused order %s on attempt %d", d.Event.Order, d.Attempt)
		case d.Event.Order == "o-retry":
			rows, err := b.Inbox.Failing(ctx, txmsg.FailingFilter{Group: group, IDs: []string{d.Message.ID}})
			if err != nil {
				return err
			}
			mu.Lock()
			seen = rows
			mu.Unlock()
		case d.Event.Order == "o-dead" && broken.Load():
			panic(errors.New("nil stock record for order o-dead"))
		}
		mu.Lock()
		handled[d.Message.ID]++
		mu.Unlock()
		return nil
	})
	cons, err := txrmq.NewConsumer(b.Inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{
		Conn:  txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Group: group, RetryDelayLevel: 1, MaxReconsumeTimes: 2,
	})
	require.NoError(t, err)
	require.NoError(t, cons.Start(ctx))
	t.Cleanup(func() { _ = cons.Close(context.Background()) })

	retried, dead := txmsg.NewID(), txmsg.NewID()
	require.NoError(t, b.Pub.Publish(ctx,
		&txmsg.Message{ID: retried, Topic: b.Topic, Keys: []string{"order-retry"}, Body: dashtest.Body(dashtest.Event{Order: "o-retry", Qty: 1})},
		&txmsg.Message{ID: dead, Topic: b.Topic, Keys: []string{"order-dead"}, Body: dashtest.Body(dashtest.Event{Order: "o-dead", Qty: 2})}))

	// The retried message: two failures recorded, then handled, then gone.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled[retried] == 1
	}, 90*time.Second, 100*time.Millisecond)
	mu.Lock()
	require.Len(t, seen, 1, "its third attempt found its row")
	require.Equal(t, 2, seen[0].Failures)
	require.Equal(t, 2, seen[0].Attempt)
	require.Contains(t, seen[0].Error, "stock service refused order o-retry on attempt 2")
	require.False(t, seen[0].DeadLettered)
	mu.Unlock()
	require.Eventually(t, func() bool {
		rows, err := b.Inbox.Failing(ctx, txmsg.FailingFilter{Group: group, IDs: []string{retried}})
		return err == nil && len(rows) == 0
	}, 10*time.Second, 100*time.Millisecond, "the handled message's row goes")

	// The dead message: three failures, the last one final.
	require.Eventually(t, func() bool {
		rows, err := b.Inbox.Failing(ctx, txmsg.FailingFilter{Group: group, IDs: []string{dead}})
		return err == nil && len(rows) == 1 && rows[0].DeadLettered
	}, 90*time.Second, 200*time.Millisecond)
	rows, err := b.Inbox.Failing(ctx, txmsg.FailingFilter{Group: group, IDs: []string{dead}})
	require.NoError(t, err)
	require.Equal(t, 3, rows[0].Failures)
	require.Contains(t, rows[0].Error, "nil stock record for order o-dead")

	c := client(t)
	csrf := login(t, b, c, token)
	page := Mount("/consumers?group=" + url.QueryEscape(group))
	var body string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		body = get(t, c, b.Server.URL+page).body
		if resendBox.MatchString(dlqTable(body)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead-lettered message never showed on the Consumers page:\n%s", failingSection(body))
		}
	}
	require.Contains(t, body, "nil stock record for order o-dead")
	require.Contains(t, body, "dead-lettered")
	require.Contains(t, body, `class="rows dlq"`)
	require.Regexp(t, `<tr data-msg-id="`+dead+`"><td class="mono">`, body, "in the retry topic too")
	ref := resendBox.FindStringSubmatch(dlqTable(body))[1]
	// The overview counts the group's failing message and links to it.
	overview := get(t, c, b.URL).body
	require.Regexp(t, `<td class="n failing bad"><a href="/ops/consumers\?group=`+regexp.QuoteMeta(group)+`#failing">1</a>`, overview)

	// Resend to the failing group alone, now that its handler is fixed.
	require.True(t, b.WaitHandled(b.Group, dead, time.Minute), "the bed's own group handled it")
	observed := b.Observer.Count(dead)
	require.Positive(t, observed)
	broken.Store(false)
	res := do(t, c, "POST", b.URL+"consumers/resend", url.Values{"id": {ref}, "group": {group}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Contains(t, get(t, c, b.Server.URL+res.header.Get("Location")).body, "Resent 1 message(s)")
	require.True(t, b.WaitHandled(group, dead, 90*time.Second), "the resent message reached the failing group's handler")
	rows, err = b.Inbox.Failing(ctx, txmsg.FailingFilter{Group: group})
	require.NoError(t, err)
	require.Empty(t, rows)
	time.Sleep(3 * time.Second)
	require.Equal(t, observed, b.Observer.Count(dead), "another group subscribed to the topic never got the resend")
	mu.Lock()
	require.Equal(t, 1, handled[dead])
	mu.Unlock()

	logs := b.Logs.String()
	require.Contains(t, logs, `"action":"consumer.resend"`)
	require.Contains(t, logs, `"who":"alice@`)

	// A position with nothing there, and a malformed one.
	res = do(t, c, "POST", b.URL+"consumers/resend", url.Values{"id": {"no-broker/0/999999"}, "group": {group}, "csrf": {csrf}}, nil)
	require.NotEqual(t, http.StatusSeeOther, res.status)
	res = do(t, c, "POST", b.URL+"consumers/resend", url.Values{"id": {"garbage"}, "group": {group}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusBadRequest, res.status)
}

// failingSection is the Consumers page's failing part, for failure
// messages.
func failingSection(page string) string {
	if i := strings.Index(page, `id="failing"`); i >= 0 {
		page = page[i:]
	}
	if i := strings.Index(page, "Parked messages"); i >= 0 {
		page = page[:i]
	}
	return page
}

// dlqTable is the page from its first dead-letter table on.
func dlqTable(page string) string {
	if i := strings.Index(page, `class="rows dlq"`); i >= 0 {
		return page[i:]
	}
	return ""
}

// TestFailingRetryNow: a group whose broker retries come two minutes
// apart gets a failing message again at once with Retry now, once its
// handler is fixed; the row goes when it is handled, and no other group
// receives the copy.
func TestFailingRetryNow(t *testing.T) {
	t.Parallel()
	const token = "tok-0b8d3e6f4c21"
	b := dashtest.New(t, dashtest.Options{Broker: true, Token: token, AllowActions: true})
	ctx := context.Background()
	group := testbed.Name(t, "drg")
	var broken atomic.Bool
	broken.Store(true)
	route := txmsg.Handle(txmsg.Topic[dashtest.Event]{Name: b.Topic}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[dashtest.Event]) error {
		if broken.Load() {
			return errors.New("warehouse API timed out")
		}
		return nil
	})
	cons, err := txrmq.NewConsumer(b.Inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{
		Conn:  txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Group: group, RetryDelayLevel: 6, // 2 min
	})
	require.NoError(t, err)
	require.NoError(t, cons.Start(ctx))
	t.Cleanup(func() { _ = cons.Close(context.Background()) })

	id := txmsg.NewID()
	require.NoError(t, b.Pub.Publish(ctx, &txmsg.Message{ID: id, Topic: b.Topic, Keys: []string{"order-88"},
		Properties: map[string]string{"tenant": "acme"}, Body: dashtest.Body(dashtest.Event{Order: "o-88", Qty: 3})}))
	require.Eventually(t, func() bool {
		rows, err := b.Inbox.Failing(ctx, txmsg.FailingFilter{Group: group, IDs: []string{id}})
		return err == nil && len(rows) == 1
	}, time.Minute, 100*time.Millisecond)
	b.Observer.Delivered(t, id)
	observed := b.Observer.Count(id)

	c := client(t)
	csrf := login(t, b, c, token)
	broken.Store(false)
	start := time.Now()
	res := do(t, c, "POST", b.URL+"consumers/retry", url.Values{"id": {id}, "group": {group}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Contains(t, get(t, c, b.Server.URL+res.header.Get("Location")).body, "Sent 1 message(s) to group")
	require.True(t, b.WaitHandled(group, id, 90*time.Second))
	require.Less(t, time.Since(start), time.Minute, "handled before the broker's retry, two minutes after the failure")
	require.Eventually(t, func() bool {
		rows, err := b.Inbox.Failing(ctx, txmsg.FailingFilter{Group: group})
		return err == nil && len(rows) == 0
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, observed, b.Observer.Count(id), "the other group did not get the copy")
	require.Contains(t, b.Logs.String(), `"action":"consumer.retry"`)

	// Nothing is failing now: a second retry finds nothing.
	res = do(t, c, "POST", b.URL+"consumers/retry", url.Values{"id": {id}, "group": {group}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusNotFound, res.status)
}

package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txmsg/txmsg/dashboard/internal/rmqadmin"
	"github.com/txmsg/txmsg/internal/rmqmsg"
	"github.com/txmsg/txmsg/txmsg"
)

// Bounds of the Consumers page's failing section.
const (
	// maxFailingShown is the most failing-table rows the page lists.
	maxFailingShown = 200
	// brokerPerQueue is how many of the newest messages of each queue of
	// a group's %RETRY% and %DLQ% topics the page reads.
	brokerPerQueue = 20
	// maxBrokerGroups is the most groups whose retry and dead-letter
	// topics the page reads when no group is selected.
	maxBrokerGroups = 10
)

// failingView is the Consumers page's account of failing consumers: the
// handler failures the inboxes recorded and, with name servers, what
// waits in each group's retry and dead-letter topics on the broker.
type failingView struct {
	Groups []*troubleGroup
	// Broker says the broker was read; Resend that messages of a
	// dead-letter topic can be sent to their group again.
	Broker, Resend bool
	// Skipped are groups whose broker topics were not read (more than
	// maxBrokerGroups): select one to see them.
	Skipped []string
	Failing int // rows listed
	More    bool
}

// troubleGroup is one consumer group's failures.
type troubleGroup struct {
	Group            string
	Failing          []txmsg.FailingRow
	Retry, DLQ       []brokerMsg
	RetryErr, DLQErr string
}

// RetryWaiting counts the messages of the retry topic the group has not
// consumed yet.
func (g *troubleGroup) RetryWaiting() int {
	n := 0
	for _, m := range g.Retry {
		if !m.Consumed {
			n++
		}
	}
	return n
}

// RetryTopic and DLQTopic are the group's topics on the broker.
func (g *troubleGroup) RetryTopic() string { return "%RETRY%" + g.Group }

// DLQTopic is the group's dead-letter topic.
func (g *troubleGroup) DLQTopic() string { return "%DLQ%" + g.Group }

// brokerMsg is a message of a retry or dead-letter topic.
type brokerMsg struct {
	Ref       string // broker/queue/offset: what a resend names
	ID        string // txmsg ID (the dedupe key)
	Topic     string // the topic it was first sent to
	Tag, Keys string
	Reconsume int32
	StoredAt  time.Time
	OriginID  string // the broker's ID of the message first delivered
	Body      []byte
	Consumed  bool // the group's committed offset is past it
}

// failingFor builds the failing section for group (every group when
// empty). A broker that does not answer is reported per group; the
// database's error fails the page.
func (d *Dashboard) failingFor(ctx context.Context, group string) (*failingView, error) {
	rows, err := d.inbox.Failing(ctx, txmsg.FailingFilter{Group: group, Limit: maxFailingShown + 1})
	if err != nil {
		return nil, err
	}
	v := &failingView{Broker: d.rmq != nil}
	if len(rows) > maxFailingShown {
		rows, v.More = rows[:maxFailingShown], true
	}
	v.Failing = len(rows)
	_, v.Resend = d.cfg.Publisher.(txmsg.GroupPublisher)
	byName := map[string]*troubleGroup{}
	add := func(name string) *troubleGroup {
		g := byName[name]
		if g == nil {
			g = &troubleGroup{Group: name}
			byName[name] = g
			v.Groups = append(v.Groups, g)
		}
		return g
	}
	if group != "" {
		add(group)
	}
	for _, r := range rows {
		g := add(r.ConsumerGroup)
		g.Failing = append(g.Failing, r)
	}
	if d.rmq != nil && group == "" {
		// The groups the tables know, so that a group whose failures were
		// not recorded (a database outage, an older consumer) still shows
		// its dead-letter topic.
		handled, parked, err := d.groupCounts(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range []map[string]int64{handled, parked} {
			for name := range m {
				add(name)
			}
		}
	}
	sort.Slice(v.Groups, func(i, j int) bool { return v.Groups[i].Group < v.Groups[j].Group })
	if d.rmq == nil {
		return v, nil
	}
	read := v.Groups
	if len(read) > maxBrokerGroups {
		for _, g := range read[maxBrokerGroups:] {
			v.Skipped = append(v.Skipped, g.Group)
		}
		read = read[:maxBrokerGroups]
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, g := range read {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var err error
			if g.Retry, err = d.brokerMessages(ctx, g.RetryTopic(), g.Group); err != nil {
				g.RetryErr = err.Error()
			}
			if g.DLQ, err = d.brokerMessages(ctx, g.DLQTopic(), ""); err != nil {
				g.DLQErr = err.Error()
			}
		}()
	}
	wg.Wait()
	// Groups with nothing to show are left out, unless selected.
	kept := v.Groups[:0]
	for _, g := range v.Groups {
		if g.Group == group || len(g.Failing)+len(g.Retry)+len(g.DLQ) > 0 || g.RetryErr != "" || g.DLQErr != "" {
			kept = append(kept, g)
		}
	}
	v.Groups = kept
	return v, nil
}

// brokerMessages reads the newest messages of a retry or dead-letter
// topic; with a group, each says whether the group consumed it already.
func (d *Dashboard) brokerMessages(ctx context.Context, topic, group string) ([]brokerMsg, error) {
	msgs, err := d.rmq.Newest(ctx, topic, brokerPerQueue, group)
	out := make([]brokerMsg, 0, len(msgs))
	for _, m := range msgs {
		rec := rmqmsg.Received(m.MessageExt)
		out = append(out, brokerMsg{
			Ref:       fmt.Sprintf("%s/%d/%d", m.Broker, m.QueueID, m.QueueOffset),
			ID:        rec.Message.ID,
			Topic:     rec.Message.Topic,
			Tag:       rec.Message.Tag,
			Keys:      strings.Join(rec.Message.Keys, " "),
			Reconsume: m.ReconsumeTimes,
			StoredAt:  time.UnixMilli(m.StoreTimestamp),
			OriginID:  m.GetProperty("ORIGIN_MESSAGE_ID"),
			Body:      m.Body,
			Consumed:  m.Consumed,
		})
	}
	if err != nil {
		return out, fmt.Errorf("read %s: %w", topic, err)
	}
	return out, nil
}

// parseRef splits a brokerMsg.Ref.
func parseRef(ref string) (broker string, queue int, offset int64, err error) {
	i := strings.LastIndexByte(ref, '/')
	j := -1
	if i > 0 {
		j = strings.LastIndexByte(ref[:i], '/')
	}
	if j <= 0 {
		return "", 0, 0, badRequest("%q does not name a message of a dead-letter topic (broker/queue/offset).", ref)
	}
	q, err1 := strconv.Atoi(ref[j+1 : i])
	off, err2 := strconv.ParseInt(ref[i+1:], 10, 64)
	if err1 != nil || err2 != nil || q < 0 || off < 0 {
		return "", 0, 0, badRequest("%q does not name a message of a dead-letter topic (broker/queue/offset).", ref)
	}
	return ref[:j], q, off, nil
}

// consumerResend sends messages of a group's dead-letter topic to that
// group alone again: each is read back from %DLQ%<group> at the position
// the form names and published to %RETRY%<group> with its txmsg ID, keys,
// tag, properties and body, its original topic in RETRY_TOPIC
// (txmsg.GroupPublisher). The dead-letter copy stays where it is; the
// message's row of the failing table goes, since the broker counts the
// resent copy as the group's first attempt.
func (d *Dashboard) consumerResend(r *http.Request, who string) (*actionResult, error) {
	gp, ok := d.cfg.Publisher.(txmsg.GroupPublisher)
	if !ok || d.rmq == nil {
		return nil, &httpError{status: http.StatusConflict, title: "No publisher",
			msg: "Resend reads the dead-letter topic and publishes to the group's retry topic: the dashboard needs name servers and a publisher that sends to one group (txmsgctl serve -namesrv, or Config.NameServers and a txrmq.Publisher as Config.Publisher)."}
	}
	group, err := formGroup(r)
	if err != nil {
		return nil, err
	}
	refs, err := selection(r)
	if err != nil {
		return nil, err
	}
	dlq := "%DLQ%" + group
	var sent []string
	var errs []error
	for _, ref := range refs {
		broker, queue, offset, err := parseRef(ref)
		if err != nil {
			return nil, err
		}
		ext, err := d.rmq.At(r.Context(), dlq, broker, queue, offset)
		if errors.Is(err, rmqadmin.ErrNotFound) {
			errs = append(errs, fmt.Errorf("%s: no message at %s (the broker may have deleted it)", dlq, ref))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s at %s: %w", dlq, ref, err))
			continue
		}
		m := rmqmsg.Received(ext).Message
		if err := gp.PublishToGroup(r.Context(), group, m); err != nil {
			errs = append(errs, fmt.Errorf("resend %s to group %s: %w", m.ID, group, err))
			continue
		}
		sent = append(sent, m.ID)
		// The group starts over with it: a failure of the resent copy is
		// recorded anew, from its first attempt.
		if _, err := d.inbox.DeleteFailing(r.Context(), group, m.ID); err != nil {
			d.log.Warn("resent a dead-lettered message but could not delete its failing row", "group", group, "txmsg_id", m.ID, "err", err)
		}
	}
	err = errors.Join(errs...)
	d.log.Info("dashboard action", "who", who, "action", "consumer.resend", "group", group, "refs", refs, "txmsg_ids", sent, "err", err)
	back := backTo(r, "/consumers?group="+url.QueryEscape(group))
	switch {
	case err != nil && len(sent) == 0:
		return nil, err
	case err != nil:
		return &actionResult{msg: fmt.Sprintf("Resent %d message(s) to group %s; the others failed: %v", len(sent), group, err), back: back}, nil
	}
	return &actionResult{msg: fmt.Sprintf("Resent %d message(s) from %s to group %s alone (its retry topic), with their txmsg IDs: its inbox drops any it handled already. The dead-letter copies stay.", len(sent), dlq, group), back: back}, nil
}

// withGroups adds the failing view's groups to the group filter's
// choices.
func (v *failingView) withGroups(counts []groupView) []groupView {
	seen := map[string]bool{}
	for _, c := range counts {
		seen[c.Group] = true
	}
	for _, g := range v.Groups {
		if !seen[g.Group] {
			counts = append(counts, groupView{Group: g.Group})
		}
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].Group < counts[j].Group })
	return counts
}

// consumerRetryNow publishes the selected failing messages of a group
// again, from their rows, to that group alone (txmsg.GroupPublisher), so
// that a handler fixed meanwhile gets them now rather than at the broker's
// next retry. The broker's own retry copy still comes later: the inbox
// drops it once one copy was handled. The rows of the messages sent are
// deleted: the copy counts as the group's first attempt, and a failure of
// it writes a new row. Rows whose body is stored cut are refused.
func (d *Dashboard) consumerRetryNow(r *http.Request, who string) (*actionResult, error) {
	gp, ok := d.cfg.Publisher.(txmsg.GroupPublisher)
	if !ok {
		return nil, &httpError{status: http.StatusConflict, title: "No publisher",
			msg: "Retry now publishes to the group's retry topic: the dashboard needs a publisher that sends to one group (txmsgctl serve -namesrv, or a txrmq.Publisher as Config.Publisher)."}
	}
	group, err := formGroup(r)
	if err != nil {
		return nil, err
	}
	ids, err := selection(r)
	if err != nil {
		return nil, err
	}
	rows, err := d.inbox.Failing(r.Context(), txmsg.FailingFilter{Group: group, IDs: ids})
	if err != nil {
		return nil, err
	}
	var sent []string
	var errs []error
	for _, row := range rows {
		m, err := row.Message()
		if err == nil {
			err = gp.PublishToGroup(r.Context(), group, m)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("retry %s in group %s: %w", row.MsgID, group, err))
			continue
		}
		sent = append(sent, row.MsgID)
		// The copy counts as a first attempt, so a handled copy would not
		// remove the row: it goes now, and comes back if the copy fails.
		if _, err := d.inbox.DeleteFailing(r.Context(), group, row.MsgID); err != nil {
			d.log.Warn("sent a failing message again but could not delete its failing row", "group", group, "txmsg_id", row.MsgID, "err", err)
		}
	}
	err = errors.Join(errs...)
	d.log.Info("dashboard action", "who", who, "action", "consumer.retry", "group", group, "txmsg_ids", ids, "sent", sent, "err", err)
	back := backTo(r, "/consumers?group="+url.QueryEscape(group))
	switch {
	case err != nil && len(sent) == 0:
		return nil, err
	case err != nil:
		return &actionResult{msg: fmt.Sprintf("Sent %d message(s) to group %s again; the others failed: %v", len(sent), group, err), back: back}, nil
	case len(sent) == 0:
		return nil, notFound("Group %q has none of the selected messages failing; they may have been handled meanwhile.", group)
	}
	return &actionResult{msg: fmt.Sprintf("Sent %d message(s) to group %s alone (its retry topic) to be retried now; the broker's own retry comes later and is dropped as a duplicate once one copy is handled.", len(sent), group), back: back}, nil
}

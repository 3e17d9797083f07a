package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/txmsg/txmsg/txmsg"
)

// cmdFailing lists the messages whose handler is failing, per consumer
// group, from the inbox's failing table; with IDs it shows those messages
// whole: every field, the last error and the stored part of the body.
func cmdFailing(ctx context.Context, e *env, args []string) error {
	fs, c := newFlags(e, "failing", "failing [-group G] [-limit N] [ID...]")
	group := fs.String("group", "", "consumer group: only its failing messages")
	limit := fs.Int("limit", 100, "list at most this many, in the order of their first failure")
	full := fs.Bool("full", false, fmt.Sprintf("with IDs: print the whole stored body (at most %d bytes; by default the first %d)", txmsg.MaxFailingBody, maxPrintedBody))
	ids, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return usageError("-limit must not be negative")
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	k, err := c.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	if err := k.need(ctx, k.inbox.FailingTable(), "failing-table"); err != nil {
		return err
	}
	if len(ids) > 0 {
		rows, err := k.inbox.Failing(ctx, txmsg.FailingFilter{Group: *group, IDs: ids})
		if err != nil {
			return err
		}
		found := map[string]bool{}
		bo := bodyOut{full: *full}
		for _, r := range rows {
			found[r.MsgID] = true
			note := ""
			if r.BodyTruncated() {
				note = fmt.Sprintf(" (only the first %d of %d bytes are stored)", len(r.Body), r.BodySize)
			}
			if err := showFields(e, &bo, [][2]string{
				{"msg_id", r.MsgID}, {"group", r.ConsumerGroup}, {"state", failingState(r)}, {"broker_msg_id", r.BrokerMessageID},
				{"topic", r.Topic}, {"tag", r.Tag}, {"keys", r.Keys}, {"failures", fmt.Sprint(r.Failures)},
				{"attempt", fmt.Sprint(r.Attempt)}, {"first_failed_at", stamp(r.FirstFailedAt)}, {"last_failed_at", stamp(r.LastFailedAt)},
				{"error", r.Error}, {"properties", r.Properties}, {"body_size", fmt.Sprint(r.BodySize) + note},
			}, r.Body); err != nil {
				return err
			}
		}
		return notFound(ids, found)
	}
	rows, err := k.inbox.Failing(ctx, txmsg.FailingFilter{Group: *group, Limit: *limit})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "MSG ID\tGROUP\tTOPIC\tSTATE\tFAILURES\tATTEMPT\tFIRST FAILED\tLAST FAILED\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.MsgID, r.ConsumerGroup, r.Topic, failingState(r), r.Failures, r.Attempt,
			r.FirstFailedAt.UTC().Format(time.RFC3339), r.LastFailedAt.UTC().Format(time.RFC3339), oneLine(e.scrub(r.Error), 80))
	}
	fmt.Fprintf(tw, "(%d failing message(s) shown)\n", len(rows))
	return nil
}

// failingState says whether the broker still retries a failing message.
func failingState(r txmsg.FailingRow) string {
	if r.DeadLettered {
		return "dead-lettered"
	}
	return "retrying"
}

package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/txmsg"
)

// Kinds of parked messages.
const (
	kindOutbox   = "outbox"   // outbox rows parked after MaxAttempts failures
	kindConsumer = "consumer" // messages a consumer parked: their body could not be decoded
)

// parkedCmd is what every parked subcommand parses.
type parkedCmd struct {
	fs    *flag.FlagSet
	c     *common
	kind  string
	group string
	ids   []string
}

func newParkedCmd(e *env, name, usage string) *parkedCmd {
	fs, c := newFlags(e, "parked "+name, "parked "+name+" "+usage)
	d := &parkedCmd{fs: fs, c: c}
	fs.StringVar(&d.kind, "kind", "", "outbox (parked outbox rows) or consumer (messages consumers parked); required")
	fs.StringVar(&d.group, "group", "", "consumer group (kind consumer): only its parked messages")
	return d
}

func (d *parkedCmd) parse(args []string) error {
	ids, err := parse(d.fs, args)
	if err != nil {
		return err
	}
	d.ids = ids
	switch d.kind {
	case kindOutbox:
		if d.group != "" {
			return usageError("-group applies to -kind consumer only")
		}
	case kindConsumer:
	case "":
		return usageError("-kind is required: outbox or consumer")
	default:
		return usageError("-kind %q: want outbox or consumer", d.kind)
	}
	return nil
}

// open connects and checks that the kind's table exists.
func (d *parkedCmd) open(ctx context.Context, e *env) (*conn, error) {
	k, err := d.c.open(ctx, e)
	if err != nil {
		return nil, err
	}
	if d.kind == kindOutbox {
		err = k.need(ctx, k.ob.Table(), "outbox-table")
	} else {
		_, parked := k.inbox.Tables()
		err = k.need(ctx, parked, "parked-table")
	}
	if err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

// parked returns the parked messages with the given txmsg IDs (all when
// ids is empty), of d.group when set, oldest first.
func (d *parkedCmd) parked(ctx context.Context, k *conn, ids []string, limit int) ([]txmsg.ParkedRow, error) {
	return k.inbox.Parked(ctx, txmsg.ParkedFilter{Group: d.group, IDs: ids, Limit: limit})
}

func cmdParkedList(ctx context.Context, e *env, args []string) error {
	d := newParkedCmd(e, "list", "-kind outbox|consumer [flags]")
	limit := d.fs.Int("limit", 100, "show at most this many, oldest first")
	if err := d.parse(args); err != nil {
		return err
	}
	if len(d.ids) > 0 {
		return usageError("parked list takes no IDs; use parked show")
	}
	ctx, cancel := context.WithTimeout(ctx, d.c.timeout)
	defer cancel()
	k, err := d.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	if d.kind == kindOutbox {
		rows, err := k.ob.List(ctx, outbox.ListFilter{Status: outbox.StatusParked, Limit: *limit})
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "MSG ID\tTOPIC\tATTEMPTS\tPARKED AT\tLAST ERROR")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.MsgID, r.Topic, r.Attempts, r.UpdatedAt.UTC().Format(time.RFC3339), oneLine(e.scrub(r.LastError), 80))
		}
		fmt.Fprintf(tw, "(%d parked row(s) shown)\n", len(rows))
		return nil
	}
	rows, err := d.parked(ctx, k, nil, *limit)
	if err != nil {
		return err
	}
	fmt.Fprintln(tw, "MSG ID\tGROUP\tTOPIC\tATTEMPT\tPARKED AT\tERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.MsgID, r.ConsumerGroup, r.Topic, r.Attempt, r.ParkedAt.UTC().Format(time.RFC3339), oneLine(e.scrub(r.Error), 80))
	}
	fmt.Fprintf(tw, "(%d parked message(s) shown)\n", len(rows))
	return nil
}

func cmdParkedShow(ctx context.Context, e *env, args []string) error {
	d := newParkedCmd(e, "show", "-kind outbox|consumer [flags] ID...")
	var bo bodyOut
	d.fs.BoolVar(&bo.full, "full", false, fmt.Sprintf("print whole bodies (by default the first %d bytes of each)", maxPrintedBody))
	d.fs.StringVar(&bo.file, "out", "", "write the body, as stored, to this new file instead of printing it (one ID; kind consumer: with -group when several groups parked it)")
	if err := d.parse(args); err != nil {
		return err
	}
	if len(d.ids) == 0 {
		return usageError("parked show needs the txmsg IDs to show")
	}
	if bo.file != "" && len(d.ids) != 1 {
		return usageError("-out writes one body: give one ID, not %d", len(d.ids))
	}
	if bo.file != "" && bo.full {
		return usageError("-out and -full do not go together: -out writes the whole body to the file")
	}
	ctx, cancel := context.WithTimeout(ctx, d.c.timeout)
	defer cancel()
	k, err := d.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	found := map[string]bool{}
	if d.kind == kindOutbox {
		rows, err := k.ob.List(ctx, outbox.ListFilter{IDs: d.ids})
		if err != nil {
			return err
		}
		for _, r := range rows {
			found[r.MsgID] = true
			if err := showFields(e, &bo, [][2]string{
				{"msg_id", r.MsgID}, {"status", r.Status.Name()}, {"topic", r.Topic}, {"tag", r.Tag},
				{"keys", r.Keys}, {"sharding_key", r.ShardingKey}, {"attempts", fmt.Sprint(r.Attempts)},
				{"created_at", stamp(r.CreatedAt)}, {"updated_at", stamp(r.UpdatedAt)}, {"next_attempt_at", stamp(r.NextAttemptAt)},
				{"last_error", r.LastError}, {"properties", r.Properties},
			}, r.Body); err != nil {
				return err
			}
		}
	} else {
		rows, err := d.parked(ctx, k, d.ids, 0)
		if err != nil {
			return err
		}
		if bo.file != "" && len(rows) > 1 {
			groups := make([]string, len(rows))
			for i, r := range rows {
				groups[i] = r.ConsumerGroup
			}
			return usageError("%s is parked by %d groups (%s): pass -group to pick the one whose body -out writes", d.ids[0], len(rows), strings.Join(groups, ", "))
		}
		for _, r := range rows {
			found[r.MsgID] = true
			if err := showFields(e, &bo, [][2]string{
				{"msg_id", r.MsgID}, {"group", r.ConsumerGroup}, {"broker_msg_id", r.BrokerMessageID}, {"topic", r.Topic},
				{"tag", r.Tag}, {"keys", r.Keys}, {"attempt", fmt.Sprint(r.Attempt)}, {"parked_at", stamp(r.ParkedAt)},
				{"error", r.Error}, {"properties", r.Properties},
			}, r.Body); err != nil {
				return err
			}
		}
	}
	return notFound(d.ids, found)
}

// notFound reports the IDs that found is missing.
func notFound(ids []string, found map[string]bool) error {
	var missing []string
	for _, id := range ids {
		if !found[id] && !slices.Contains(missing, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not found: %s", strings.Join(missing, " "))
	}
	return nil
}

// maxPrintedBody bounds how much of a body parked show prints without
// -full: a body may be megabytes.
const maxPrintedBody = 4 << 10

// bodyOut is where parked show puts bodies: cut on stdout, whole with
// -full, or in a file with -out.
type bodyOut struct {
	full bool
	file string
}

func showFields(e *env, bo *bodyOut, fields [][2]string, body []byte) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s\t%s\n", f[0], e.scrub(f[1]))
	}
	_ = tw.Flush()
	if bo.file != "" {
		if err := writeBodyFile(bo.file, body); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "body (%d bytes) written to %s\n\n", len(body), bo.file)
		return nil
	}
	limit := maxPrintedBody
	if bo.full {
		limit = -1
	}
	writeBody(e.stdout, body, limit)
	fmt.Fprintln(e.stdout)
	return nil
}

// writeBodyFile writes body to a new file; it never overwrites one.
func writeBodyFile(name string, body []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("-out %s: the file exists; remove it or name a new one", name)
	}
	if err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	if _, err := f.Write(body); err != nil {
		_ = f.Close()
		return fmt.Errorf("-out: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	return nil
}

// writeBody prints body as text when it is printable UTF-8, else as
// base64: at most limit bytes of text or limit characters of base64
// (all of it when limit < 0), then a line saying what was left out.
func writeBody(w io.Writer, body []byte, limit int) {
	printable := utf8.Valid(body) && !strings.ContainsFunc(string(body), func(r rune) bool {
		return !unicode.IsPrint(r) && !unicode.IsSpace(r)
	})
	shown := body
	if printable {
		if limit >= 0 && len(body) > limit {
			n := limit
			for n > 0 && !utf8.RuneStart(body[n]) {
				n--
			}
			shown = body[:n]
		}
	} else if limit >= 0 && base64.StdEncoding.EncodedLen(len(body)) > limit {
		shown = body[:limit/4*3]
	}
	cut := len(shown) < len(body)
	switch {
	case printable && !cut:
		fmt.Fprintf(w, "body (%d bytes):\n%s\n", len(body), body)
	case printable:
		fmt.Fprintf(w, "body (%d bytes, the first %d shown):\n%s\n", len(body), len(shown), shown)
	case !cut:
		fmt.Fprintf(w, "body (%d bytes, base64):\n%s\n", len(body), base64.StdEncoding.EncodeToString(body))
	default:
		fmt.Fprintf(w, "body (%d bytes, base64 of the first %d shown):\n%s\n", len(body), len(shown), base64.StdEncoding.EncodeToString(shown))
	}
	if cut {
		fmt.Fprintf(w, "… %d more bytes left out: pass -full to print the whole body, or -out FILE to write it to a file\n", len(body)-len(shown))
	}
}

func cmdParkedRequeue(ctx context.Context, e *env, args []string) error {
	d := newParkedCmd(e, "requeue", "-kind outbox|consumer [flags] ID...")
	var pub publishFlags
	pub.register(d.fs)
	if err := d.parse(args); err != nil {
		return err
	}
	if len(d.ids) == 0 {
		return usageError("parked requeue needs the txmsg IDs to requeue")
	}
	ctx, cancel := context.WithTimeout(ctx, d.c.timeout)
	defer cancel()
	if d.kind == kindConsumer {
		if err := pub.resolve(e); err != nil {
			return err
		}
	}
	k, err := d.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	if d.kind == kindOutbox {
		return requeueOutbox(ctx, e, k, d.ids)
	}
	return requeueParked(ctx, e, k, d, &pub)
}

func requeueOutbox(ctx context.Context, e *env, k *conn, ids []string) error {
	n, err := k.ob.Requeue(ctx, ids...)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "requeued %d parked row(s) of %s; the relays publish them\n", n, k.ob.Table())
	if int(n) == len(ids) {
		return nil
	}
	rows, err := k.ob.List(ctx, outbox.ListFilter{IDs: ids})
	if err != nil {
		return err
	}
	status := map[string]outbox.Status{}
	for _, r := range rows {
		status[r.MsgID] = r.Status
	}
	var problems []string
	for _, id := range ids {
		switch s, ok := status[id]; {
		case !ok:
			problems = append(problems, id+" (not found)")
		case s != outbox.StatusPending:
			problems = append(problems, fmt.Sprintf("%s (%s)", id, s.Name()))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("not requeued: %s", strings.Join(problems, ", "))
	}
	return nil
}

// publishFlags are the broker settings of parked requeue -kind consumer.
type publishFlags struct {
	nameServers, group, namespace, accessKey, secretKey string
}

func (p *publishFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.nameServers, "namesrv", "", "kind consumer: RocketMQ name servers, comma separated (default $TXMSG_NAMESRV)")
	fs.StringVar(&p.group, "producer-group", "txmsgctl", "kind consumer: producer group to publish with")
	fs.StringVar(&p.namespace, "namespace", "", "kind consumer: RocketMQ namespace")
	fs.StringVar(&p.accessKey, "access-key", "", "kind consumer: ACL access key (default $TXMSG_ACCESS_KEY)")
	fs.StringVar(&p.secretKey, "secret-key", "", "kind consumer: ACL secret key (default $TXMSG_SECRET_KEY; prefer it: flags show in ps)")
}

func (p *publishFlags) resolve(e *env) error {
	if p.nameServers == "" {
		p.nameServers = e.getenv("TXMSG_NAMESRV")
	}
	if p.accessKey == "" {
		p.accessKey = e.getenv("TXMSG_ACCESS_KEY")
	}
	if p.secretKey == "" {
		p.secretKey = e.getenv("TXMSG_SECRET_KEY")
	}
	e.addSecret(p.secretKey)
	e.addSecret(p.accessKey)
	if p.nameServers == "" {
		return usageError("-kind consumer republishes: pass -namesrv or set TXMSG_NAMESRV")
	}
	return nil
}

func (p *publishFlags) config(e *env, topics []string) txrmq.PublisherConfig {
	return txrmq.PublisherConfig{
		Conn: txrmq.Conn{
			NameServers: strings.FieldsFunc(p.nameServers, func(r rune) bool { return r == ',' || r == ';' || r == ' ' }),
			Namespace:   p.namespace,
			AccessKey:   p.accessKey,
			SecretKey:   p.secretKey,
			Logger:      e.log,
		},
		Group:   p.group,
		Retries: 1,
		Topics:  topics,
	}
}

// requeueParked replays each parked message to the group that parked it
// alone, through the group's retry topic, and deletes its parked row
// (txmsg.Inbox.RequeueParked).
func requeueParked(ctx context.Context, e *env, k *conn, d *parkedCmd, pf *publishFlags) error {
	rows, err := d.parked(ctx, k, d.ids, 0)
	if err != nil {
		return err
	}
	found := map[string]bool{}
	var topics []string
	for _, r := range rows {
		found[r.MsgID] = true
		if !slices.Contains(topics, r.Topic) {
			topics = append(topics, r.Topic)
		}
	}
	if len(rows) == 0 {
		return notFound(d.ids, found)
	}
	pub, err := txrmq.NewPublisher(pf.config(e, topics))
	if err != nil {
		return usageError("%v", err)
	}
	if err := pub.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()
	done, err := k.inbox.RequeueParked(ctx, pub, d.group, d.ids...)
	for _, r := range done {
		fmt.Fprintf(e.stdout, "replayed %s (topic %s) to group %s only; deleted %d parked row(s)\n", r.ID, r.Topic, r.Group, r.Deleted)
	}
	return errors.Join(err, notFound(d.ids, found))
}

func cmdParkedPurge(ctx context.Context, e *env, args []string) error {
	d := newParkedCmd(e, "purge", "-kind outbox|consumer [flags] (-older-than D | ID...)")
	olderThan := d.fs.Duration("older-than", 0, "delete those that died or were parked more than this long ago (0s: all of them)")
	batch := d.fs.Int("batch", txmsg.DefaultPurgeBatch, "rows deleted per statement")
	if err := d.parse(args); err != nil {
		return err
	}
	byAge := false
	d.fs.Visit(func(f *flag.Flag) { byAge = byAge || f.Name == "older-than" })
	switch {
	case byAge == (len(d.ids) > 0):
		return usageError("parked purge needs either -older-than or IDs (-older-than 0s deletes every one)")
	case *olderThan < 0:
		return usageError("-older-than must not be negative")
	}
	ctx, cancel := context.WithTimeout(ctx, d.c.timeout)
	defer cancel()
	k, err := d.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	var n int64
	var what string
	if d.kind == kindOutbox {
		what = "parked row(s) from " + k.ob.Table()
		if byAge {
			n, err = k.ob.PurgeParked(ctx, *olderThan, *batch)
		} else {
			n, err = k.ob.DeleteParked(ctx, d.ids...)
		}
	} else {
		_, table := k.inbox.Tables()
		what = "parked message(s) from " + table
		if byAge {
			n, err = k.inbox.PurgeParked(ctx, *olderThan, *batch, d.group)
		} else {
			n, err = k.inbox.DeleteParked(ctx, d.group, d.ids...)
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted %d %s\n", n, what)
	return nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// oneLine cuts s to its first line and at most n runes.
func oneLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n-1]) + "…"
	}
	return s
}

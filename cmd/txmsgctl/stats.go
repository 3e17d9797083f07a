package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/txmsg/txmsg/checker"
)

// statsReport is what stats prints; -json prints it as JSON. A part whose
// table does not exist has Present false and zero counts.
type statsReport struct {
	Database string       `json:"database"`
	Outbox   outboxStats  `json:"outbox"`
	Barrier  barrierStats `json:"barrier"`
	Inbox    groupCounts  `json:"inbox"`
	Parked   groupCounts  `json:"parked"`
	Failing  groupCounts  `json:"failing"`
}

type outboxStats struct {
	Table                string  `json:"table"`
	Present              bool    `json:"present"`
	Pending              int64   `json:"pending"`
	Sent                 int64   `json:"sent"`
	Parked               int64   `json:"parked"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
}

type barrierStats struct {
	Table      string `json:"table"`
	Present    bool   `json:"present"`
	Committed  int64  `json:"committed"`
	RolledBack int64  `json:"rolled_back"`
}

type groupCounts struct {
	Table   string           `json:"table"`
	Present bool             `json:"present"`
	Rows    int64            `json:"rows"`
	Groups  map[string]int64 `json:"groups"`
}

func cmdStats(ctx context.Context, e *env, args []string) error {
	fs, c := newFlags(e, "stats", "stats [flags]")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("stats takes no arguments, got %q", pos)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	k, err := c.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	r, err := collectStats(ctx, k)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printStats(e.stdout, r)
	return nil
}

func collectStats(ctx context.Context, k *conn) (*statsReport, error) {
	inTable, parkedTable := k.inbox.Tables()
	r := &statsReport{
		Database: k.display,
		Outbox:   outboxStats{Table: k.ob.Table(), Present: k.has(ctx, k.ob.Table())},
		Barrier:  barrierStats{Table: k.chk.Table(), Present: k.has(ctx, k.chk.Table())},
		Inbox:    groupCounts{Table: inTable, Present: k.has(ctx, inTable), Groups: map[string]int64{}},
		Parked:   groupCounts{Table: parkedTable, Present: k.has(ctx, parkedTable), Groups: map[string]int64{}},
		Failing:  groupCounts{Table: k.inbox.FailingTable(), Present: k.has(ctx, k.inbox.FailingTable()), Groups: map[string]int64{}},
	}
	if !r.Outbox.Present && !r.Barrier.Present && !r.Inbox.Present && !r.Parked.Present {
		return nil, fmt.Errorf("%w: none of %s, %s, %s, %s is in database %q; create them with \"txmsgctl migrate\", or name yours with the -*-table flags",
			errNoTable, r.Outbox.Table, r.Barrier.Table, r.Inbox.Table, r.Parked.Table, k.dbName)
	}
	if r.Outbox.Present {
		s, err := k.ob.Stats(ctx)
		if err != nil {
			return nil, err
		}
		r.Outbox.Pending, r.Outbox.Sent, r.Outbox.Parked = s.Pending, s.Sent, s.Parked
		r.Outbox.OldestPendingSeconds = s.OldestPending.Seconds()
	}
	if r.Barrier.Present {
		counts, err := k.chk.Counts(ctx)
		if err != nil {
			return nil, err
		}
		r.Barrier.Committed, r.Barrier.RolledBack = counts[checker.StateCommitted], counts[checker.StateRolledBack]
	}
	for _, g := range []struct {
		counts *groupCounts
		count  func(context.Context) (map[string]int64, error)
	}{{&r.Inbox, k.inbox.HandledByGroup}, {&r.Parked, k.inbox.ParkedByGroup}, {&r.Failing, k.inbox.FailingByGroup}} {
		if !g.counts.Present {
			continue
		}
		groups, err := g.count(ctx)
		if err != nil {
			return nil, err
		}
		for name, n := range groups {
			g.counts.Groups[name] = n
			g.counts.Rows += n
		}
	}
	return r, nil
}

func printStats(w io.Writer, r *statsReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "database\t%s\n", r.Database)
	missing := func(table string) { fmt.Fprintf(tw, "  (table %s not found)\n", table) }

	fmt.Fprintf(tw, "\noutbox\t%s\n", r.Outbox.Table)
	if r.Outbox.Present {
		oldest := "-"
		if r.Outbox.Pending > 0 {
			oldest = (time.Duration(r.Outbox.OldestPendingSeconds * float64(time.Second))).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "  pending\t%d\toldest %s\n", r.Outbox.Pending, oldest)
		fmt.Fprintf(tw, "  sent\t%d\t\n", r.Outbox.Sent)
		fmt.Fprintf(tw, "  parked\t%d\t\n", r.Outbox.Parked)
	} else {
		missing(r.Outbox.Table)
	}

	fmt.Fprintf(tw, "\nbarrier\t%s\n", r.Barrier.Table)
	if r.Barrier.Present {
		fmt.Fprintf(tw, "  committed\t%d\t\n", r.Barrier.Committed)
		fmt.Fprintf(tw, "  rolled_back\t%d\t\n", r.Barrier.RolledBack)
	} else {
		missing(r.Barrier.Table)
	}

	for _, g := range []struct {
		title string
		c     groupCounts
	}{{"inbox", r.Inbox}, {"parked", r.Parked}, {"failing", r.Failing}} {
		fmt.Fprintf(tw, "\n%s\t%s\n", g.title, g.c.Table)
		if !g.c.Present {
			missing(g.c.Table)
			continue
		}
		fmt.Fprintf(tw, "  total\t%d\t\n", g.c.Rows)
		groups := make([]string, 0, len(g.c.Groups))
		for name := range g.c.Groups {
			groups = append(groups, name)
		}
		sort.Strings(groups)
		for _, name := range groups {
			fmt.Fprintf(tw, "  group %s\t%d\t\n", name, g.c.Groups[name])
		}
	}
}

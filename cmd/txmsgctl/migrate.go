package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// migrateParts are the table groups migrate knows, in the order it
// creates them.
var migrateParts = []string{"barrier", "inbox", "outbox"}

func cmdMigrate(ctx context.Context, e *env, args []string) error {
	fs, c := newFlags(e, "migrate", "migrate [flags]")
	only := fs.String("only", strings.Join(migrateParts, ","), "tables to create: barrier (transactional mode), inbox (consumers: inbox and dead-letter tables), outbox (local-table mode: outbox and lease tables)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("migrate takes no arguments, got %q", pos)
	}
	parts := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(migrateParts, p) {
			return usageError("-only: unknown part %q; want some of %s", p, strings.Join(migrateParts, ","))
		}
		parts[p] = true
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	k, err := c.open(ctx, e)
	if err != nil {
		return err
	}
	defer k.close()
	for _, p := range migrateParts {
		if !parts[p] {
			continue
		}
		var tables string
		switch p {
		case "barrier":
			tables = k.chk.Table()
			err = k.chk.Migrate(ctx)
		case "inbox":
			in, dl := k.inbox.Tables()
			tables = in + ", " + dl
			err = k.inbox.Migrate(ctx)
		case "outbox":
			tables = k.ob.Table() + ", " + k.ob.Table() + "_lease"
			err = k.ob.Migrate(ctx)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%-8s %s: ok\n", p, tables)
	}
	return nil
}

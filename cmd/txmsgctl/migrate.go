package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/txmsg/txmsg/fleet"
)

// migrateParts are the table groups migrate knows, in the order it
// creates them.
var migrateParts = []string{"barrier", "inbox", "outbox", "fleet"}

func cmdMigrate(ctx context.Context, e *env, args []string) error {
	fs, c := newFlags(e, "migrate", "migrate [flags]")
	only := fs.String("only", strings.Join(migrateParts, ","), "tables to create: barrier (transactional mode), inbox (consumers: inbox and parked tables), outbox (local-table mode: outbox, lease and relay tables), fleet (the instance table and the dashboard's history and its lease)")
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
		var tables []string
		switch p {
		case "barrier":
			tables = []string{k.chk.Table()}
		case "inbox":
			in, dl := k.inbox.Tables()
			tables = []string{in, dl, k.inbox.FailingTable()}
		case "outbox":
			tables = []string{k.ob.Table(), k.ob.Table() + "_lease", k.ob.Table() + "_relay"}
		case "fleet":
			tables = []string{c.instancesTable, c.historyTable, c.historyTable + fleet.HistoryLeaseSuffix}
		}
		before, err := k.columnTypes(ctx, tables)
		if err != nil {
			return err
		}
		switch p {
		case "barrier":
			err = k.chk.Migrate(ctx)
		case "inbox":
			err = k.inbox.Migrate(ctx)
		case "outbox":
			err = k.ob.Migrate(ctx)
		case "fleet":
			err = errors.Join(fleet.Migrate(ctx, k.db, c.instancesTable), fleet.MigrateHistory(ctx, k.db, c.historyTable))
		}
		if err != nil {
			return err
		}
		after, err := k.columnTypes(ctx, tables)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%-8s %s: ok\n", p, strings.Join(tables, ", "))
		for _, c := range changed(before, after) {
			fmt.Fprintf(e.stdout, "         %s: converted to %s (compares byte for byte)\n", c, after[c])
		}
	}
	return nil
}

// columnTypes returns the column types of tables as table.column -> type,
// for the columns that exist.
func (k *conn) columnTypes(ctx context.Context, tables []string) (map[string]string, error) {
	var rows []struct{ Tbl, Col, Typ string }
	err := k.db.WithContext(ctx).Raw(`SELECT table_name AS tbl, column_name AS col, column_type AS typ
		FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name IN ?`, tables).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", strings.Join(tables, ", "), err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.Tbl+"."+r.Col] = r.Typ
	}
	return out, nil
}

// changed lists, sorted, the columns of before whose type differs in after:
// what migrate converted in existing tables.
func changed(before, after map[string]string) []string {
	var out []string
	for c, t := range before {
		if a, ok := after[c]; ok && a != t {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

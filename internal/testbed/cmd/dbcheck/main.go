// Command dbcheck checks that the database server of TXMSG_DSN lets its
// user do what txmsg's tests, demo, benchmarks and chaos suite do: create,
// use and drop databases named txmsg_*. The Makefile runs it instead of
// scripts/mysql.sh when TXMSG_DSN names a server of the user's own. When a
// privilege is missing it prints the statements a DBA runs and exits 1.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"

	"github.com/txmsg/txmsg/internal/redact"
	"github.com/txmsg/txmsg/internal/testbed"
)

func main() {
	dsn := testbed.DSN()
	if err := testbed.CheckGrants(context.Background(), dsn); err != nil {
		fmt.Fprintln(os.Stderr, "dbcheck:", err)
		os.Exit(1)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dbcheck: TXMSG_DSN is not a valid MySQL DSN")
		os.Exit(1)
	}
	fmt.Printf("dbcheck: %s may create and drop %s* databases\n", redact.DSN(cfg), testbed.DBPrefix)
}

// Command prepare makes what a program run against the test bed expects to
// exist: the database named in a DSN, and topics on the test broker.
// `make quickstart` runs it before the quick-start programs:
//
//	go run ./internal/testbed/cmd/prepare -dsn "$DSN" -topic quickstart
//
// The database is created with CREATE DATABASE IF NOT EXISTS; a topic that
// exists is left as it is. Exit status: 0 when everything exists, 1
// otherwise, 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/txmsg/txmsg/internal/testbed"
)

func main() {
	dsn := flag.String("dsn", "", "MySQL DSN whose database to create (optional)")
	topics := flag.String("topic", "", "topics to create on the test broker, comma separated (optional)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "prepare: unexpected arguments:", flag.Args())
		os.Exit(2)
	}
	if err := prepare(*dsn, *topics); err != nil {
		fmt.Fprintln(os.Stderr, "prepare:", err)
		os.Exit(1)
	}
}

func prepare(dsn, topics string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return fmt.Errorf("-dsn is not a MySQL DSN")
		}
		if cfg.DBName == "" {
			return fmt.Errorf("-dsn names no database")
		}
		name := cfg.DBName
		cfg.DBName = ""
		db, err := testbed.Open(cfg.FormatDSN())
		if err != nil {
			return fmt.Errorf("database server at %s: %w", cfg.Addr, err)
		}
		quoted := "`" + strings.ReplaceAll(name, "`", "``") + "`"
		if err := db.WithContext(ctx).Exec("CREATE DATABASE IF NOT EXISTS " + quoted + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin").Error; err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if err := testbed.CreateTopic(ctx, t, 4); err != nil {
			return err
		}
	}
	return nil
}

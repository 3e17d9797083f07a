package testbed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// GrantStatements returns the statements a DBA runs so that the user of
// dsn can do what the tests, the demo, txbench and txchaos do: create,
// use and drop databases whose names start with [DBPrefix]. They are the
// statements scripts/mysql.sh runs on the test bed's own server.
func GrantStatements(dsn string) string {
	user, pass := "txmsg", "…"
	if cfg, err := mysql.ParseDSN(dsn); err == nil && cfg.User != "" {
		user = cfg.User
		if cfg.Passwd == "" {
			pass = ""
		}
	}
	var b strings.Builder
	for _, host := range []string{"localhost", "127.0.0.1"} {
		fmt.Fprintf(&b, "  CREATE USER IF NOT EXISTS '%s'@'%s' IDENTIFIED BY '%s';\n", user, host, pass)
	}
	for _, host := range []string{"localhost", "127.0.0.1"} {
		fmt.Fprintf(&b, "  GRANT ALL PRIVILEGES ON `%s%%`.* TO '%s'@'%s';\n", strings.ReplaceAll(DBPrefix, "_", `\_`), user, host)
	}
	b.WriteString("  (for a server on another host, use the host the tests connect from instead of localhost and 127.0.0.1)")
	return b.String()
}

// grantError wraps err, an error from creating or dropping a txmsg_*
// database, with the statements that allow it when the server refused
// it for want of a privilege.
func grantError(dsn, what string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1045, 1142, 1227: // access denied (database, login, table, privilege)
			return fmt.Errorf("%s: %w\nthe test bed needs a user that may create and drop databases named %s*; a DBA can allow it with:\n%s",
				what, err, DBPrefix, GrantStatements(dsn))
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// CheckGrants checks that the user of dsn can create a database named
// with [DBPrefix], create a table in it and drop it again, as the tests do.
// Its error names the statements a DBA runs when a privilege is missing.
func CheckGrants(ctx context.Context, dsn string) error {
	base, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("TXMSG_DSN is not a valid MySQL DSN: %w", err)
	}
	base.DBName = ""
	admin, err := Open(base.FormatDSN())
	if err != nil {
		return grantError(dsn, "connect to "+base.Addr, err)
	}
	defer func() {
		if sqlDB, err := admin.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	name := DBPrefix + "grantcheck_" + Suffix()
	if err := admin.WithContext(ctx).Exec("CREATE DATABASE `" + name + "`").Error; err != nil {
		return grantError(dsn, "create database "+name, err)
	}
	tableErr := admin.WithContext(ctx).Exec("CREATE TABLE `" + name + "`.t (id BIGINT PRIMARY KEY)").Error
	if err := admin.WithContext(ctx).Exec("DROP DATABASE `" + name + "`").Error; err != nil {
		return grantError(dsn, "drop database "+name, err)
	}
	if tableErr != nil {
		return grantError(dsn, "create a table in "+name, tableErr)
	}
	return nil
}

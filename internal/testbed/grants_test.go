package testbed_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/txmsg/txmsg/internal/testbed"
)

// The test bed's user may create and drop txmsg_* databases.
func TestCheckGrantsPassesForTheTestBedUser(t *testing.T) {
	testbed.DB(t) // skips or fails when the server does not answer
	if err := testbed.CheckGrants(t.Context(), testbed.DSN()); err != nil {
		t.Fatal(err)
	}
}

// A user the server refuses gets the statements a DBA runs.
func TestCheckGrantsNamesTheStatementsToRun(t *testing.T) {
	testbed.DB(t)
	cfg, err := mysql.ParseDSN(testbed.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = "txmsg_nobody", "wrong"
	err = testbed.CheckGrants(context.Background(), cfg.FormatDSN())
	if err == nil {
		t.Fatal("CheckGrants accepted a user that does not exist")
	}
	for _, want := range []string{
		"CREATE USER IF NOT EXISTS 'txmsg_nobody'@'localhost'",
		"GRANT ALL PRIVILEGES ON `txmsg\\_%`.* TO 'txmsg_nobody'@'127.0.0.1';",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("error shows the password:\n%v", err)
	}
}

// On the test bed's own server (scripts/mysql.sh), the user holds exactly
// the txmsg_* grant: a database outside the prefix is refused, so a test,
// example or tool that uses another name fails here as it would on a
// fresh machine, not only there.
func TestTestBedUserIsLimitedToThePrefix(t *testing.T) {
	db := testbed.DB(t)
	cfg, err := mysql.ParseDSN(testbed.DSN())
	if err != nil {
		t.Fatal(err)
	}
	own, _ := mysql.ParseDSN(testbed.DefaultDSN)
	if cfg.Addr != own.Addr {
		t.Skipf("TXMSG_DSN names a server of your own (%s), whose grants are its DBA's", cfg.Addr)
	}
	err = db.Exec("CREATE DATABASE `notxmsg_" + testbed.Suffix() + "`").Error
	if err == nil {
		t.Fatal("the test bed's user created a database outside txmsg_*: its grants are wider than scripts/mysql.sh makes them")
	}
	var grants []string
	if err := db.Raw("SHOW GRANTS").Scan(&grants).Error; err != nil {
		t.Fatal(err)
	}
	for _, g := range grants {
		if strings.Contains(g, " ON *.* ") && !strings.HasPrefix(g, "GRANT USAGE ON *.*") {
			t.Errorf("wider grant than txmsg_*: %s", g)
		}
	}
}

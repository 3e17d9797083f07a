package testbed_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
)

// scalar runs a one-value query on db.
func scalar(t *testing.T, db *gorm.DB, query string) string {
	t.Helper()
	var v string
	if err := db.Raw(query).Scan(&v).Error; err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return v
}

// isolation returns the session's and the server's isolation level:
// transaction_isolation on MySQL 8 and MariaDB >= 11.1, tx_isolation before.
func isolation(t *testing.T, db *gorm.DB) (session, global string) {
	t.Helper()
	var row struct{ Session, Global string }
	err := db.Raw("SELECT @@session.transaction_isolation AS session, @@global.transaction_isolation AS global").Scan(&row).Error
	if err != nil {
		err = db.Raw("SELECT @@session.tx_isolation AS session, @@global.tx_isolation AS global").Scan(&row).Error
	}
	if err != nil {
		t.Fatalf("read the isolation level: %v", err)
	}
	return row.Session, row.Global
}

func dbCollation(t *testing.T, db *gorm.DB) string {
	return scalar(t, db, "SELECT default_collation_name FROM information_schema.schemata WHERE schema_name = DATABASE()")
}

// A ServerDefaults database is what a plain CREATE DATABASE makes, and its
// sessions run at the server's default isolation level.
func TestServerDefaultsDatabase(t *testing.T) {
	db := testbed.DB(t, testbed.ServerDefaults())
	server := scalar(t, db, "SELECT @@global.collation_server")
	if got := dbCollation(t, db); got != server {
		t.Fatalf("database collation %s, want the server's default %s", got, server)
	}
	session, global := isolation(t, db)
	if session != global {
		t.Fatalf("session isolation %s, want the server's default %s", session, global)
	}
	t.Logf("server defaults: collation %s, isolation %s", server, global)

	plain := testbed.DB(t)
	want := "utf8mb4_bin"
	if testbed.UseServerDefaults() {
		want = server
	}
	if got := dbCollation(t, plain); got != want {
		t.Fatalf("DB without options: collation %s, want %s (%s=%q)", got, want, testbed.DefaultsEnv, "1")
	}
}

// ServerDefaults drops an isolation level that TXMSG_DSN forces, so a run
// on server defaults meets the server's own.
func TestServerDefaultsIgnoresDSNIsolation(t *testing.T) {
	t.Setenv("TXMSG_DSN", testbed.DSN()+"&tx_isolation=%27READ-UNCOMMITTED%27")
	t.Setenv(testbed.DefaultsEnv, "")
	forced := testbed.DB(t)
	if session, _ := isolation(t, forced); session != "READ-UNCOMMITTED" {
		t.Fatalf("the DSN's tx_isolation did not apply (session %s); the check below would prove nothing", session)
	}
	db := testbed.DB(t, testbed.ServerDefaults())
	if session, global := isolation(t, db); session != global {
		t.Fatalf("session isolation %s, want the server's default %s", session, global)
	}
}

package testbed

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/txrmq/rmqlog"
)

// Runnable examples (func ExampleXxx with an "// Output:" comment) cannot
// skip themselves the way tests do. A package whose examples need the
// services calls RunWithExamples from its TestMain: when the services do
// not answer and TXMSG_REQUIRE_SERVICES is not 1, or in a run made for a
// special broker (see [SpecialRun]), it skips every example of the package
// (with -test.skip) and says so; otherwise the examples run against the
// services like the tests do. ExampleDB and ExampleTopic give
// each example its own database and topic; the databases are dropped when
// the run ends.

// examplePattern matches the examples of a package.
const examplePattern = "^Example"

var exampleDBs struct {
	sync.Mutex
	names []string
	admin *gorm.DB
}

// RunWithExamples runs m as described above and returns its exit code.
func RunWithExamples(m *testing.M) int {
	QuietClientLogs()
	if !flag.Parsed() {
		flag.Parse()
	}
	why := servicesDown()
	if s := SpecialRun(); s != "" {
		why = "this run is for the tests that need " + s
	}
	if why != "" {
		if Required() && SpecialRun() == "" {
			fmt.Fprintf(os.Stderr, "testbed: %s (TXMSG_REQUIRE_SERVICES=1)\n", why)
			return 1
		}
		skip := examplePattern
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
			skip = f.Value.String() + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintf(os.Stderr, "testbed: cannot skip the examples: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "testbed: %s; skipping this package's examples\n", why)
	}
	code := m.Run()
	dropExampleDBs()
	return code
}

// servicesDown names the first service that does not answer, or "".
func servicesDown() string {
	base, err := mysql.ParseDSN(DSN())
	if err != nil {
		return "TXMSG_DSN is not a valid MySQL DSN"
	}
	for _, s := range []struct{ what, addr, script string }{
		{"RocketMQ name server", NameServer(), "scripts/rocketmq.sh start"},
		{"RocketMQ broker", Broker(), "scripts/rocketmq.sh start"},
		{"MySQL/MariaDB", base.Addr, "scripts/mysql.sh start"},
	} {
		if err := dial(s.addr); err != nil {
			return fmt.Sprintf("%s at %s is not reachable (%v); start it with %s", s.what, s.addr, err, s.script)
		}
	}
	return ""
}

// ExampleDB creates a database for one example and returns a gorm handle
// on it and its DSN. It panics when it cannot: an example has no other way
// to fail.
func ExampleDB(prefix string) (*gorm.DB, string) {
	base, err := mysql.ParseDSN(DSN())
	if err != nil {
		panic("testbed: TXMSG_DSN is not a valid MySQL DSN")
	}
	exampleDBs.Lock()
	defer exampleDBs.Unlock()
	if exampleDBs.admin == nil {
		if exampleDBs.admin, err = Open(base.FormatDSN()); err != nil {
			panic(fmt.Sprintf("testbed: open %s: %v", base.Addr, err))
		}
	}
	name := strings.ToLower(ExampleName(DBPrefix + "ex_" + prefix))
	if err := exampleDBs.admin.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin").Error; err != nil {
		panic("testbed: " + grantError(DSN(), "create database "+name, err).Error())
	}
	exampleDBs.names = append(exampleDBs.names, name)
	cfg := base.Clone()
	cfg.DBName = name
	db, err := Open(cfg.FormatDSN())
	if err != nil {
		panic(fmt.Sprintf("testbed: open database %s: %v", name, err))
	}
	return db, cfg.FormatDSN()
}

func dropExampleDBs() {
	exampleDBs.Lock()
	defer exampleDBs.Unlock()
	for _, name := range exampleDBs.names {
		_ = exampleDBs.admin.Exec("DROP DATABASE IF EXISTS `" + name + "`").Error
	}
	exampleDBs.names = nil
}

// ExampleName returns a name unique to this run, built from prefix, safe
// as a topic, group or database name.
func ExampleName(prefix string) string {
	return unsafeChars.ReplaceAllString(prefix, "_") + "_" + Suffix()
}

// ExampleTopic creates a topic unique to this run, named after prefix,
// and waits for its route. It panics when it cannot.
func ExampleTopic(prefix string) string {
	rmqlog.Install(slog.Default(), slog.LevelError)
	topic := ExampleName(prefix)
	if err := CreateTopic(context.Background(), topic, 4); err != nil {
		panic(fmt.Sprintf("testbed: %v", err))
	}
	return topic
}

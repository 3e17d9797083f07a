package main

import (
	"os"
	"testing"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestMain sets the MySQL driver's process-wide logger (testbed does it
// once, lazily) before any test runs: these tests parse DSNs in parallel
// with tests that open databases, and the driver reads that logger while
// parsing.
func TestMain(m *testing.M) {
	testbed.QuietClientLogs()
	os.Exit(m.Run())
}

package scenario

import (
	"os"
	"testing"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestMain sets the MySQL driver's process-wide logger before any test
// runs; see examples/orderservice/main_test.go.
func TestMain(m *testing.M) {
	testbed.QuietClientLogs()
	os.Exit(m.Run())
}

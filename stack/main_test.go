package stack

import (
	"os"
	"testing"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestMain runs the examples against the test bed, or skips them when it
// is down (see testbed.RunWithExamples).
func TestMain(m *testing.M) { os.Exit(testbed.RunWithExamples(m)) }

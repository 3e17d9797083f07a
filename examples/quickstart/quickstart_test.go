package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

func TestMain(m *testing.M) {
	testbed.QuietClientLogs()
	os.Exit(m.Run())
}

var savedLine = regexp.MustCompile(`(?m)^saved order (\S+), event (\S+) committed \((\S+) mode\)$`)

// The quick-start program, built once and run as a user would in each
// mode, against a database and topic of its own, exits 0 having saved its
// order, published its event and handled it once; the tables say so too.
func TestQuickstartPrograms(t *testing.T) {
	testbed.RequireBroker(t)
	exe := filepath.Join(t.TempDir(), "quickstart")
	out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	for _, mode := range []string{"transactional", "outbox"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			db, dsn := testbed.DBWithDSN(t)
			topic := testbed.Topic(t)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			run := exec.CommandContext(ctx, exe, "-mode", mode)
			run.Env = append(os.Environ(), "QUICKSTART_DSN="+dsn, "QUICKSTART_NAMESRV="+testbed.NameServer(), "QUICKSTART_TOPIC="+topic)
			var stdout, stderr bytes.Buffer
			run.Stdout, run.Stderr = &stdout, &stderr
			err := run.Run()
			require.NoError(t, err, "%s failed\nstdout:\n%s\nstderr:\n%s", mode, &stdout, &stderr)

			m := savedLine.FindStringSubmatch(stdout.String())
			require.NotNil(t, m, "no 'saved order' line; stdout:\n%s", &stdout)
			orderID, eventID := m[1], m[2]
			require.Equal(t, mode, m[3], "the mode the program ran in")
			require.Contains(t, stdout.String(), "handling order "+orderID+" (amount 42), delivery 1")

			var orders int64
			require.NoError(t, db.Table("orders").Where("id = ? AND amount = 42", orderID).Count(&orders).Error)
			require.EqualValues(t, 1, orders, "the order row")
			var inbox []txmsg.InboxRow
			require.NoError(t, db.Table(txmsg.DefaultInboxTable).Find(&inbox).Error)
			require.Len(t, inbox, 1, "one handled event in the inbox")
			require.Equal(t, eventID, inbox[0].MsgID)
			require.Equal(t, topic+"-consumer", inbox[0].ConsumerGroup)
			switch mode {
			case "transactional":
				var state string
				require.NoError(t, db.Table("txmsg_barrier").Select("state").Where("tx_id = ?", eventID).Scan(&state).Error)
				require.Equal(t, "committed", state, "the barrier row")
			case "outbox":
				var status string
				require.NoError(t, db.Table("txmsg_outbox").Select("status").Where("msg_id = ?", eventID).Scan(&status).Error)
				require.Equal(t, "sent", status, "the outbox row")
			}
		})
	}
}

// README markers around the quick start the README shows.
const (
	beginMarker = "<!-- quickstart:begin -->"
	endMarker   = "<!-- quickstart:end -->"
)

// quickstartBlock returns the body of the ```go fence between the
// quick-start markers of readme.
func quickstartBlock(readme string) (string, error) {
	_, rest, ok := strings.Cut(readme, beginMarker)
	if !ok {
		return "", errors.New("README.md has no " + beginMarker + " line")
	}
	block, _, ok := strings.Cut(rest, endMarker)
	if !ok {
		return "", errors.New("README.md has " + beginMarker + " but no " + endMarker)
	}
	_, code, ok := strings.Cut(block, "```go\n")
	if !ok {
		return "", errors.New("the quick-start block of README.md has no ```go fence")
	}
	code, _, ok = strings.Cut(code, "```")
	if !ok {
		return "", errors.New("the ```go fence of the quick-start block of README.md is not closed")
	}
	return code, nil
}

// The README shows main.go verbatim, so what a newcomer
// copies is what this directory's test runs.
func TestREADMEShowsTheQuickstart(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	want, err := os.ReadFile("main.go")
	require.NoError(t, err)
	got, err := quickstartBlock(string(readme))
	require.NoError(t, err, "README.md must show examples/quickstart/main.go verbatim in a ```go fence between %s and %s", beginMarker, endMarker)
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("README.md's quick start differs from examples/quickstart/main.go at line %d:\nREADME:  %q\nmain.go: %q\nCopy main.go into the block between %s and %s.", i+1, g, w, beginMarker, endMarker)
			}
		}
	}
}

func TestQuickstartBlock(t *testing.T) {
	t.Parallel()
	code := "package main\n\nfunc main() {}\n"
	got, err := quickstartBlock("# x\n\n" + beginMarker + "\n```go\n" + code + "```\n" + endMarker + "\nmore\n")
	require.NoError(t, err)
	require.Equal(t, code, got)
	for name, readme := range map[string]string{
		"no markers":   "# x\n```go\n" + code + "```\n",
		"no end":       beginMarker + "\n```go\n" + code + "```\n",
		"no fence":     beginMarker + "\n" + code + endMarker,
		"open fence":   beginMarker + "\n```go\n" + code + endMarker,
		"other fences": beginMarker + "\n```sh\ngo run .\n```\n" + endMarker,
	} {
		_, err := quickstartBlock(readme)
		require.Error(t, err, name)
	}
}

package modcheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// userProgram imports every public package a user of both modes, metrics
// and tracing imports, and uses each, so that the linker keeps them.
const userProgram = `package main

import (
	"fmt"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txotel"
	"github.com/txmsg/txmsg/adapters/txprom"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/txmsg"
)

func main() {
	hooks := txmsg.Hooks{txprom.New(txprom.Config{}), txotel.New(txotel.Config{})}
	cfg := txrmq.PublisherConfig{Hooks: hooks}
	fmt.Println(len(hooks), cfg.Group == "", outbox.DefaultTable, checker.DefaultTable, txmsg.NewID() != "")
}
`

// modules are txmsg's modules, by path relative to the repository root.
var modules = map[string]string{
	"github.com/txmsg/txmsg":                 ".",
	"github.com/txmsg/txmsg/adapters/txprom": "adapters/txprom",
	"github.com/txmsg/txmsg/adapters/txotel": "adapters/txotel",
}

// TestUserModuleBuilds writes a module into a temporary directory outside
// the repository that requires txmsg and both nested modules at the
// version the nested modules require of the root, and builds and runs a
// program that imports txmsg, txrmq, outbox, checker, txprom and txotel,
// with GOWORK=off and GOFLAGS=-mod=mod, as `go get` would leave a user's
// module. A module whose version is not published yet is replaced by its
// directory here; every other requirement resolves as it would for the
// user. It fails when a nested module still needs a replace of the root,
// requires a pseudo-version, or does not build against the root's tree.
func TestUserModuleBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module from scratch")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	require.False(t, strings.HasPrefix(dir, root+string(filepath.Separator)), "the scratch module must be outside the repository")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	goCmd := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}

	// The nested modules name the root's version; the user's module asks
	// for the same one of all three.
	version := ""
	for path, rel := range modules {
		gomod, err := os.ReadFile(filepath.Join(root, rel, "go.mod"))
		require.NoError(t, err)
		require.NotContains(t, string(gomod), "\nreplace", "%s/go.mod must not replace anything: users' builds ignore it", rel)
		if rel == "." {
			continue
		}
		v := requiredVersion(string(gomod), "github.com/txmsg/txmsg")
		require.NotEmpty(t, v, "%s must require github.com/txmsg/txmsg", path)
		require.NotContains(t, v, "-", "%s must require a released version of the root module, not %s", path, v)
		require.True(t, version == "" || version == v, "the nested modules require different root versions: %s and %s", version, v)
		version = v
	}

	var mod strings.Builder
	fmt.Fprintf(&mod, "module example.com/txmsguser\n\ngo 1.24\n\nrequire (\n")
	for path := range modules {
		fmt.Fprintf(&mod, "\t%s %s\n", path, version)
	}
	mod.WriteString(")\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644))
	for path, rel := range modules {
		// Unpublished (or unreachable): build from this tree instead.
		if out, err := goCmd("list", "-m", path+"@"+version); err != nil {
			t.Logf("%s@%s is not available (%s); using %s", path, version, firstLine(out), filepath.Join(root, rel))
			fmt.Fprintf(&mod, "replace %s %s => %s\n", path, version, filepath.Join(root, rel))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(userProgram), 0o644))

	out, err := goCmd("build", "-o", "user", ".")
	require.NoError(t, err, "go build in a user's module:\n%s\ngo.mod:\n%s", out, mod.String())
	run := exec.CommandContext(ctx, filepath.Join(dir, "user"))
	got, err := run.CombinedOutput()
	require.NoError(t, err, string(got))
	require.Equal(t, "2 true txmsg_outbox txmsg_barrier true\n", string(got))
}

// requiredVersion returns the version gomod requires of path, or "".
func requiredVersion(gomod, path string) string {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

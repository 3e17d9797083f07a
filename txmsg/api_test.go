package txmsg_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// adapterOnly are the functions and methods package txmsg/driver holds
// for adapters; package txmsg must not export them again.
var adapterOnly = map[string]bool{
	"Hooks.Bind": true, "Hooks.BeforeSend": true, "Hooks.HalfSent": true, "Hooks.LocalDone": true,
	"Hooks.CheckBack": true, "Hooks.Held": true, "Hooks.RelayBatch": true, "Hooks.RelayUnavailable": true,
	"Hooks.BeforeHandle": true, "Hooks.Consumed": true,
	"CallLocal": true, "ReservedProperty": true,
	"Route.Process": true, "Inbox.Run": true, "Inbox.Park": true, "Inbox.ParkFailed": true,
}

// TestAdapterFunctionsStayInDriver fails when one of the functions moved to
// package txmsg/driver is exported by package txmsg again: a user's godoc
// shows only what a user calls.
func TestAdapterFunctionsStayInDriver(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var exported []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		require.Equal(t, "txmsg", f.Name.Name, e.Name())
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				typ := fd.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			exported = append(exported, name)
		}
	}
	require.NotEmpty(t, exported)
	for _, name := range exported {
		require.False(t, adapterOnly[name], "package txmsg exports %s, which belongs to package txmsg/driver", name)
	}
}

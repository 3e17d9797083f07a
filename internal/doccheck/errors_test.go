package doccheck

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// errorTableDoc is the document, relative to the repository root, whose
// "## Errors" section lists every sentinel error.
const errorTableDoc = "docs/design.md"

// sentinel is an exported package-level Err* variable set from errors.New
// or fmt.Errorf.
type sentinel struct {
	name string // package name and identifier, as the table writes it: "txmsg.ErrClosed"
	pos  string // file:line, relative to the repository root
}

// repoRoot returns the directory of the root module's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/txmsg/txmsg\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of module github.com/txmsg/txmsg above the working directory")
		}
		dir = parent
	}
}

// skipDir reports whether a directory holds no public package: internal
// packages, commands, examples, test data, and hidden or cache folders.
func skipDir(name string) bool {
	switch name {
	case "internal", "cmd", "examples", "testdata", "node_modules", "browsertest":
		return true
	}
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// publicSentinels parses every non-test Go file of the public packages
// under root and returns their sentinel errors.
func publicSentinels(root string) ([]sentinel, error) {
	var out []sentinel
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		for _, s := range sentinelsOf(f) {
			p := fset.Position(s.Pos())
			rel, _ := filepath.Rel(root, p.Filename)
			out = append(out, sentinel{name: f.Name.Name + "." + s.Name, pos: fmt.Sprintf("%s:%d", filepath.ToSlash(rel), p.Line)})
		}
		return nil
	})
	return out, err
}

// sentinelsOf returns the names of f's exported package-level Err*
// variables whose value is errors.New(…) or fmt.Errorf(…).
func sentinelsOf(f *ast.File) []*ast.Ident {
	var out []*ast.Ident
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Err") || !name.IsExported() || i >= len(vs.Values) {
					continue
				}
				if isErrorConstructor(vs.Values[i]) {
					out = append(out, name)
				}
			}
		}
	}
	return out
}

func isErrorConstructor(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	return pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf"
}

// tableEntry matches a sentinel's name in a table cell: `txmsg.ErrClosed`.
var tableEntry = regexp.MustCompile("`([a-z][a-z0-9]*\\.Err[A-Z][A-Za-z0-9_]*)`")

// errorTable returns the sentinel names in the first column of the table
// under doc's "## Errors" heading.
func errorTable(doc string) ([]string, error) {
	_, section, ok := strings.Cut(doc, "\n## Errors\n")
	if !ok {
		return nil, errors.New("no \"## Errors\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var names []string
	for line := range strings.Lines(section) {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range tableEntry.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		return nil, errors.New("the \"## Errors\" section has no table naming `pkg.ErrName` in its first column")
	}
	return names, nil
}

// The error table of docs/design.md names every sentinel error of the
// public packages, and only those.
func TestErrorTableIsComplete(t *testing.T) {
	root := repoRoot(t)
	found, err := publicSentinels(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("found no sentinel errors; the walk over the packages is broken")
	}
	doc, err := os.ReadFile(filepath.Join(root, errorTableDoc))
	if err != nil {
		t.Fatal(err)
	}
	table, err := errorTable(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", errorTableDoc, err)
	}
	declared := map[string]string{}
	for _, s := range found {
		declared[s.name] = s.pos
	}
	for _, s := range found {
		if !slices.Contains(table, s.name) {
			t.Errorf("%s's error table lacks `%s` (declared at %s): add a row for it under \"## Errors\"", errorTableDoc, s.name, s.pos)
		}
	}
	for _, name := range table {
		if _, ok := declared[name]; !ok {
			t.Errorf("%s's error table names `%s`, which no public package declares with errors.New or fmt.Errorf: rename or remove that row", errorTableDoc, name)
		}
	}
}

func TestErrorTableParsing(t *testing.T) {
	doc := "# d\n\n## Errors\n\n| error | meaning |\n|---|---|\n| `a.ErrX`, `a.ErrY` | mentions `b.ErrZ` in text |\n| `*a.T` | a type |\n\n## Next\n\n| `c.ErrW` | |\n"
	got, err := errorTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.ErrX", "a.ErrY"}; !slices.Equal(got, want) {
		t.Fatalf("errorTable = %v, want %v", got, want)
	}
	if _, err := errorTable("# d\n\n## Other\n"); err == nil {
		t.Fatal("errorTable accepted a document without an Errors section")
	}

	src := `package p

import ("errors"; "fmt")

var ErrA = errors.New("a")
var (
	ErrB, errC = fmt.Errorf("b"), errors.New("c")
	ErrD = other()
	NotErr = errors.New("x")
)

func other() error { return nil }
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, id := range sentinelsOf(f) {
		names = append(names, id.Name)
	}
	if want := []string{"ErrA", "ErrB"}; !slices.Equal(names, want) {
		t.Fatalf("sentinelsOf = %v, want %v", names, want)
	}
}

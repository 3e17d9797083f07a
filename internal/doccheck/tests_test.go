package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docsNamingTests are the documents, relative to the repository root,
// whose test names must exist: they say which test shows each behaviour.
var docsNamingTests = []string{"docs/reliability.md", "docs/benchmarks.md", "docs/design.md"}

var (
	testNameInDoc = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)`")
	testFunc      = regexp.MustCompile(`(?m)^func (Test[A-Z][A-Za-z0-9_]*)\(`)
)

// Every test a reference document names in backquotes exists as a test
// function somewhere in the repository.
func TestDocumentedTestsExist(t *testing.T) {
	root := repoRoot(t)
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docsNamingTests {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, m := range testNameInDoc.FindAllStringSubmatch(string(b), -1) {
			name := m[1]
			if seen[name] || defined[name] {
				continue
			}
			seen[name] = true
			t.Errorf("%s names `%s`, but no _test.go in the repository defines func %s: update the name in %s", doc, name, name, doc)
		}
	}
}

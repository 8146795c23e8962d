package hazards_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/hazards.md and the tests stay in step: the document names every
// hazard test of this package, and every test it names exists in the
// repository (these, the restart guard's in primitives/redlock, the
// settings check's in host).
func TestHazardDocNamesTheTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "hazards.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	root := filepath.Join("..", "..")
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache" || d.Name() == "bench" || d.Name() == "tools") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		here := filepath.Dir(path) == filepath.Join(root, "internal", "hazards")
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			name := fn.Name.Name
			defined[name] = true
			if here && strings.HasPrefix(name, "TestHazard") && !strings.Contains(string(doc), "`"+name+"`") &&
				name != "TestHazardClientPauseChild" && name != "TestHazardDocNamesTheTests" {
				t.Errorf("docs/hazards.md does not name %s", name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(named) < 10 {
		t.Fatalf("docs/hazards.md names only %d tests", len(named))
	}
	var missing []string
	for _, m := range named {
		if !defined[m[1]] && !slices.Contains(missing, m[1]) {
			missing = append(missing, m[1])
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/hazards.md names tests that do not exist: %v", missing)
	}
}

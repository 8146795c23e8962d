package scripts_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeExamples are the runnable examples README.md shows, each as a Go
// code block holding the example's body up to its // Output: comment.
var readmeExamples = []struct{ file, fn string }{
	{"primitives/lock/example_test.go", "Example"},
	{"primitives/lock/example_test.go", "ExampleLocker_AcquireFenced"},
	{"primitives/lease/example_test.go", "Example"},
	{"primitives/example_test.go", "ExampleKeepAlive"},
	{"primitives/example_test.go", "ExampleNewWaiter"},
	{"primitives/rwlock/example_test.go", "Example"},
	{"primitives/semaphore/example_test.go", "Example"},
	{"primitives/latch/example_test.go", "Example"},
	{"primitives/ratelimit/example_test.go", "Example"},
	{"primitives/ratelimit/example_http_test.go", "ExampleNewMiddleware"},
	{"host/example_test.go", "Example"},
}

// TestReadmeMirrorsExamples keeps README.md's code in step with the
// examples that `go test` runs: a README block may not drift from code
// that is known to work. The examples' test server address reads as
// 127.0.0.1:6379 in the README.
func TestReadmeMirrorsExamples(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	for _, ex := range readmeExamples {
		body := exampleBody(t, filepath.Join("..", ex.file), ex.fn)
		body = strings.ReplaceAll(body, "exampleAddr", `"127.0.0.1:6379"`)
		found := false
		for _, b := range blocks {
			if strings.Contains(b, body) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README.md has no go block containing the body of %s in %s:\n%s", ex.fn, ex.file, body)
		}
	}
}

// goBlocks returns the contents of the ```go fenced blocks of a Markdown
// text.
func goBlocks(md string) []string {
	var blocks []string
	for {
		i := strings.Index(md, "```go\n")
		if i < 0 {
			return blocks
		}
		md = md[i+len("```go\n"):]
		j := strings.Index(md, "```")
		if j < 0 {
			return blocks
		}
		blocks = append(blocks, md[:j])
		md = md[j:]
	}
}

// exampleBody returns the statements of function fn in file, de-indented
// by one tab, up to the // Output: comment.
func exampleBody(t *testing.T, file, fn string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != fn || fd.Recv != nil {
			continue
		}
		open := fset.Position(fd.Body.Lbrace).Offset + 1
		end := fset.Position(fd.Body.Rbrace).Offset
		body := string(src[open:end])
		if i := strings.Index(body, "\t// Output:"); i >= 0 {
			body = body[:i]
		}
		var lines []string
		for _, line := range strings.Split(strings.Trim(body, "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(line, "\t"))
		}
		return strings.TrimRight(strings.Join(lines, "\n"), "\n") + "\n"
	}
	t.Fatalf("%s has no func %s", file, fn)
	return ""
}

// Command depcheck enforces the dependency table of DESIGN.md §1 on the
// production (non-test) import graph of the main module:
//
//	go run ./internal/depcheck        (make depcheck)
//
// It runs `go list -deps -json ./...`, checks every package of the module
// against the first row of the table that matches it and against the
// restrictions on who may import what, prints every violation with the import
// chain that causes it and exits 1; or prints OK and exits 0. Test files are
// not looked at (tests may import anything, e.g. internal/redistest).
//
// The table is data (the rows and restrictions variables below): adding a row
// for a package that does not exist yet is harmless.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strings"
)

// Patterns are module-relative import paths ("primitives/lock") split on "/";
// a "*" segment (path.Match syntax within a segment, e.g. "*test") matches one
// segment and a "..." segment matches zero or more. A pattern for an external
// package is written in full ("github.com/redis/rueidis/...").

// row is one line of the dependency table.
type row struct {
	// Pkg selects the packages the row governs (first matching row wins).
	Pkg string
	// Imports are the project packages they may import directly. A package
	// may always import packages under its own root (Pkg with "*" segments
	// filled in and a trailing "..." dropped), e.g. primitives/internal/x may
	// import primitives/internal/y. AnyPkg allows everything.
	Imports []string
	// External are the non-standard, non-project packages that these packages,
	// or project packages they depend on, may import. What those external
	// packages import in turn is their own business. Nil means stdlib only.
	External []string
	// Why is printed with a violation.
	Why string
}

// restriction limits which packages may import a target.
type restriction struct {
	Target    string   // pattern of the restricted packages
	Importers []string // patterns of the packages allowed to import them
	Why       string
}

// AnyPkg as the only element of Imports or External allows everything.
const AnyPkg = "..."

var rueidis = []string{"github.com/redis/rueidis/..."}

// testHelper matches packages that only tests use: internal/redistest and
// similar helpers named *test below an internal/ directory (as in
// net/http/httptest). They are not production code.
const testHelper = ".../internal/.../*test"

func rows() []row {
	const prim = "primitives/... build with rueidis and the standard library alone"
	return []row{
		{Pkg: "internal/redistest", External: rueidis, Why: "redistest: standard library + rueidis"},
		{Pkg: testHelper, Imports: []string{AnyPkg}, External: []string{AnyPkg},
			Why: "test helper (never imported by production code)"},
		{Pkg: "lua/...", Why: "lua: scripts only"},
		{Pkg: "primitives/internal/base", Why: "primitives/internal/base: the leaf of sentinels and shared values, standard library only"},
		{Pkg: "primitives/internal/...", Imports: []string{"lua", "policies", "policies/builtin/...", "primitives/internal/..."}, External: rueidis, Why: prim},
		// primitives re-exports the sentinels of internal/base and wraps the
		// waiter of internal/wait as primitives.Waiter.
		{Pkg: "primitives", Imports: []string{"policies", "primitives/internal/base", "primitives/internal/wait"}, External: rueidis, Why: prim},
		// lua is not in the table for this row (scripts go through the
		// script runner in primitives/internal), but importing it directly
		// is allowed for now.
		{Pkg: "primitives/*/...",
			Imports:  []string{"primitives", "primitives/internal/...", "policies", "policies/builtin/...", "lua"},
			External: rueidis, Why: prim},
		{Pkg: "policies", Why: "policies: standard library only"},
		{Pkg: "policies/builtin/...", Imports: []string{"policies"}, Why: "policies/builtin: policies + standard library"},
		{Pkg: "policies/wasm/...", Imports: []string{"policies"}, External: []string{AnyPkg}},
		{Pkg: "policies/plugin/...", Imports: []string{"policies", "plugins/sdk/..."}, External: []string{AnyPkg}},
		{Pkg: "plugins/sdk/...", Imports: []string{"policies"}, External: []string{AnyPkg}},
		{Pkg: "plugins/examples/...", Imports: []string{"plugins/sdk/..."}, External: []string{AnyPkg}},
		{Pkg: "config/...", Imports: []string{"policies"}, External: []string{AnyPkg}},
		// The generated coordhost.v1 API code (make proto): messages and
		// connect-go stubs, importing protobuf and connect alone.
		{Pkg: "gen/...", External: []string{"google.golang.org/protobuf/...", "connectrpc.com/connect/..."},
			Why: "gen: generated API code, protobuf and connect only"},
		{Pkg: "host/...", Imports: []string{AnyPkg}, External: []string{AnyPkg}},
		// DESIGN.md §1 gives cmd/coordhost host and config only; until host
		// exists (the policies issue) the CLI drives primitives/lock itself.
		// Drop "primitives/..." from this row when host lands.
		// gen/...: the CLI's client mode (issue 11) calls the daemon's API.
		{Pkg: "cmd/coordhost/...", Imports: []string{"host/...", "config/...", "gen/...", "primitives", "primitives/lock"}, External: []string{AnyPkg},
			Why: "cmd/coordhost: host and config (primitives/lock until host exists)"},
		{Pkg: "internal/depcheck", Why: "depcheck: standard library only"},
		{Pkg: "scripts", Why: "scripts: tests of the repository's shell scripts and README (test files only)"},
		{Pkg: "internal/e2e", Why: "e2e: end-to-end tests of the daemon binary with third-party clients (test files only)"},
		{Pkg: "internal/reshard", Why: "reshard: tests of every primitive on a cluster whose slots migrate and masters fail over (test files only)"},
		{Pkg: "internal/hazards", Why: "hazards: tests reproducing docs/hazards.md (test files only)"},
	}
}

func restrictions() []restriction {
	return []restriction{
		{Target: "host/...", Importers: []string{"cmd/coordhost/...", "host/..."},
			Why: "nothing imports host except cmd/coordhost"},
		{Target: "gen/...", Importers: []string{"gen/...", "host/...", "cmd/coordhost/..."},
			Why: "the generated API code belongs to the network layer: host and the CLI only (never primitives, policies or config)"},
		{Target: testHelper, Importers: []string{testHelper},
			Why: "production code never imports test helpers such as internal/redistest"},
	}
}

// pkg is the part of `go list -json` output depcheck uses.
type pkg struct {
	ImportPath string
	Standard   bool
	DepOnly    bool
	Imports    []string
	Error      *struct{ Err string }
	DepsErrors []*struct{ Err string }
}

func main() {
	mod, err := goOutput("list", "-m")
	if err != nil {
		fail(err)
	}
	out, err := goOutput("list", "-e", "-deps", "-json=ImportPath,Standard,DepOnly,Imports,Error,DepsErrors", "./...")
	if err != nil {
		fail(err)
	}
	pkgs, err := decode(bytes.NewReader(out))
	if err != nil {
		fail(err)
	}
	problems, notes := check(strings.TrimSpace(string(mod)), pkgs, rows(), restrictions())
	for _, n := range notes {
		fmt.Println("note:", n)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "depcheck: %d violation(s) of the dependency table (DESIGN.md §1):\n", len(problems))
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "  "+p)
		}
		os.Exit(1)
	}
	fmt.Println("depcheck: OK")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "depcheck:", err)
	os.Exit(2)
}

func goOutput(args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func decode(r io.Reader) ([]*pkg, error) {
	var pkgs []*pkg
	dec := json.NewDecoder(r)
	for {
		p := new(pkg)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// check returns the violations (sorted) and notes about the module's
// packages. mod is the module path.
func check(mod string, pkgs []*pkg, rows []row, restr []restriction) (problems, notes []string) {
	byPath := make(map[string]*pkg, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	rel := func(path string) (string, bool) {
		if path == mod {
			return ".", true
		}
		r, ok := strings.CutPrefix(path, mod+"/")
		return r, ok
	}
	isExternal := func(path string) bool {
		p := byPath[path]
		_, own := rel(path)
		return !own && (p == nil || !p.Standard)
	}

	var roots []*pkg
	for _, p := range pkgs {
		if _, own := rel(p.ImportPath); own && !p.DepOnly {
			roots = append(roots, p)
		}
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].ImportPath < roots[j].ImportPath })

	rowFor := func(relPath string) *row {
		for i := range rows {
			if match(rows[i].Pkg, relPath) {
				return &rows[i]
			}
		}
		return nil
	}
	externalAllowed := func(r *row, ext string) bool {
		return r == nil || slices.ContainsFunc(r.External, func(pat string) bool { return match(pat, ext) })
	}

	for _, p := range roots {
		prel, _ := rel(p.ImportPath)
		if p.Error != nil && !strings.Contains(p.Error.Err, "build constraints exclude all Go files") {
			problems = append(problems, fmt.Sprintf("%s: %s", prel, p.Error.Err))
		}
		for _, e := range p.DepsErrors {
			problems = append(problems, fmt.Sprintf("%s: %s", prel, e.Err))
		}

		// Restrictions on direct imports.
		restricted := map[string]bool{}
		for _, imp := range p.Imports {
			irel, own := rel(imp)
			if !own {
				continue
			}
			for _, rs := range restr {
				if match(rs.Target, irel) && !matchAny(rs.Importers, prel) {
					problems = append(problems, fmt.Sprintf("%s imports %s: %s", prel, irel, rs.Why))
					restricted[irel] = true
				}
			}
		}

		r := rowFor(prel)
		if r == nil {
			notes = append(notes, fmt.Sprintf("%s is not in the dependency table", prel))
			continue
		}
		why := r.Why
		if why == "" {
			why = "row " + r.Pkg
		}
		// Direct project imports.
		root := rowRoot(r.Pkg, prel)
		for _, imp := range p.Imports {
			irel, own := rel(imp)
			if !own || irel == prel || restricted[irel] || under(irel, root) || matchAny(r.Imports, irel) {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s imports %s: not allowed (%s; may import: %s)",
				prel, irel, why, listOrNothing(r.Imports)))
		}
		// External packages pulled in by p or by project packages it needs.
		seen := map[string]bool{}
		chain := map[string][]string{prel: nil} // project package -> path from p
		queue := []string{p.ImportPath}
		for len(queue) > 0 {
			q := queue[0]
			queue = queue[1:]
			qp := byPath[q]
			if qp == nil {
				continue
			}
			qrel, _ := rel(q)
			for _, imp := range qp.Imports {
				if irel, own := rel(imp); own {
					if _, ok := chain[irel]; !ok {
						chain[irel] = append(slices.Clone(chain[qrel]), irel)
						queue = append(queue, imp)
					}
					continue
				}
				if !isExternal(imp) || seen[imp] || externalAllowed(r, imp) {
					continue
				}
				seen[imp] = true
				if q != p.ImportPath && !externalAllowed(rowFor(qrel), imp) {
					continue // reported for q itself
				}
				via := ""
				if q != p.ImportPath {
					via = " via " + strings.Join(chain[qrel], " -> ")
				}
				problems = append(problems, fmt.Sprintf("%s depends on %s%s: not allowed (%s; external: %s)",
					prel, imp, via, why, listOrNothing(r.External)))
			}
		}
	}
	return problems, notes
}

func listOrNothing(pats []string) string {
	if len(pats) == 0 {
		return "none"
	}
	return strings.Join(pats, ", ")
}

func matchAny(pats []string, path string) bool {
	return slices.ContainsFunc(pats, func(pat string) bool { return match(pat, path) })
}

// under reports whether path is root or below it.
func under(path, root string) bool {
	return root != "" && (path == root || strings.HasPrefix(path, root+"/"))
}

// rowRoot is the subtree of path that the row pattern pat names: pat's
// segments up to the first "...", with "*" segments taken from path.
// "primitives/*/..." and "primitives/lock/x" give "primitives/lock".
func rowRoot(pat, path string) string {
	ps, xs := strings.Split(pat, "/"), strings.Split(path, "/")
	var out []string
	for i, s := range ps {
		if s == "..." || i >= len(xs) {
			break
		}
		out = append(out, xs[i])
	}
	return strings.Join(out, "/")
}

// match reports whether path matches pat (see the package comment on
// patterns). AnyPkg matches everything.
func match(pat, path string) bool {
	return matchSegs(strings.Split(pat, "/"), strings.Split(path, "/"))
}

func matchSegs(pat, segs []string) bool {
	if len(pat) == 0 {
		return len(segs) == 0
	}
	if pat[0] == "..." {
		for i := 0; i <= len(segs); i++ {
			if matchSegs(pat[1:], segs[i:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 {
		return false
	}
	if ok, err := path.Match(pat[0], segs[0]); err != nil || !ok {
		return false
	}
	return matchSegs(pat[1:], segs[1:])
}

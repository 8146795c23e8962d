package main

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, path string
		want      bool
	}{
		{"primitives", "primitives", true},
		{"primitives", "primitives/lock", false},
		{"primitives/...", "primitives", true},
		{"primitives/...", "primitives/internal/wait", true},
		{"primitives/...", "primitivesx", false},
		{"primitives/*/...", "primitives/lock", true},
		{"primitives/*/...", "primitives/lock/x", true},
		{"primitives/*/...", "primitives", false},
		{"github.com/redis/rueidis/...", "github.com/redis/rueidis", true},
		{"github.com/redis/rueidis/...", "github.com/redis/rueidis/internal/cmds", true},
		{"github.com/redis/rueidis/...", "github.com/redis/rueidiscompat", false},
		{testHelper, "internal/redistest", true},
		{testHelper, "primitives/internal/wait/waittest", true},
		{testHelper, "primitives/internal/wait", false},
		{testHelper, "primitives/latest", false},
		{AnyPkg, "anything/at/all", true},
	} {
		if got := match(tc.pat, tc.path); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pat, tc.path, got, tc.want)
		}
	}
}

func TestRowRoot(t *testing.T) {
	for _, tc := range []struct{ pat, path, want string }{
		{"primitives/*/...", "primitives/lock/x", "primitives/lock"},
		{"primitives/internal/...", "primitives/internal/keys", "primitives/internal"},
		{"policies", "policies", "policies"},
	} {
		if got := rowRoot(tc.pat, tc.path); got != tc.want {
			t.Errorf("rowRoot(%q, %q) = %q, want %q", tc.pat, tc.path, got, tc.want)
		}
	}
}

const mod = "example.com/m"

// graph builds go list output: own packages are given module-relative.
func graph(edges map[string][]string, std ...string) []*pkg {
	full := func(p string) string {
		if strings.Contains(p, ".") || isStd(p, std) {
			return p
		}
		return mod + "/" + p
	}
	seen := map[string]*pkg{}
	var out []*pkg
	add := func(path string, dep bool) *pkg {
		if p, ok := seen[path]; ok {
			return p
		}
		p := &pkg{ImportPath: path, DepOnly: dep, Standard: isStd(path, std)}
		seen[path] = p
		out = append(out, p)
		return p
	}
	for from, tos := range edges {
		p := add(full(from), strings.Contains(from, "."))
		p.DepOnly = strings.Contains(from, ".")
		for _, to := range tos {
			p.Imports = append(p.Imports, full(to))
			add(full(to), true)
		}
	}
	return out
}

func isStd(p string, std []string) bool {
	for _, s := range std {
		if s == p {
			return true
		}
	}
	return false
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edges map[string][]string
		want  []string // substrings, one per expected problem
	}{
		{"clean", map[string][]string{
			"primitives/lock":          {"primitives", "primitives/internal/wait", "policies", "context", "lua"},
			"primitives/internal/wait": {"github.com/redis/rueidis", "lua", "primitives/internal/keys"},
			"primitives/internal/keys": {"strings"},
			"primitives":               {"policies"},
			"policies":                 {"time"},
			"policies/builtin":         {"policies"},
			"github.com/redis/rueidis": {"github.com/redis/rueidis/internal/cmds", "golang.org/x/sys/unix"},
			"cmd/coordhost":            {"host", "config"},
			"host":                     {"primitives/lock", "github.com/hashicorp/hcl/v2"},
			"config":                   {"policies", "github.com/hashicorp/hcl/v2"},
			"internal/redistest":       {"github.com/redis/rueidis", "os/exec"},
			"lua":                      {"embed"},
		}, nil},
		{"primitive pulls a foreign module", map[string][]string{
			"primitives/lock":          {"primitives/internal/wait"},
			"primitives/internal/wait": {"github.com/prometheus/client_golang/prometheus"},
		}, []string{
			"primitives/internal/wait depends on github.com/prometheus/client_golang/prometheus",
		}},
		{"via a package that may", map[string][]string{
			"primitives/lock":  {"internal/metrics"},
			"internal/metrics": {"github.com/prometheus/client_golang/prometheus"},
		}, []string{
			"primitives/lock imports internal/metrics: not allowed",
			"primitives/lock depends on github.com/prometheus/client_golang/prometheus via internal/metrics",
		}},
		{"policies stdlib only", map[string][]string{
			"policies":         {"github.com/redis/rueidis"},
			"policies/builtin": {"policies", "primitives"},
		}, []string{
			"policies depends on github.com/redis/rueidis",
			"policies/builtin imports primitives",
		}},
		{"kinds do not import kinds", map[string][]string{
			"primitives/redlock": {"primitives/lock"},
		}, []string{"primitives/redlock imports primitives/lock"}},
		{"host importers", map[string][]string{
			"config":        {"host"},
			"cmd/coordhost": {"host"},
			"host/grpc":     {"host"},
		}, []string{"config imports host: nothing imports host except cmd/coordhost"}},
		{"redistest in production", map[string][]string{
			"primitives/lock":                   {"internal/redistest"},
			"primitives/internal/wait/waittest": {"internal/redistest", "go.uber.org/goleak"},
			"cmd/coordhost":                     {"primitives/internal/wait/waittest"},
		}, []string{
			"cmd/coordhost imports primitives/internal/wait/waittest: production code never imports test helpers",
			"primitives/lock imports internal/redistest: production code never imports test helpers",
		}},
		{"generated API code", map[string][]string{
			"gen/coordhost/v1":                    {"google.golang.org/protobuf/reflect/protoreflect"},
			"gen/coordhost/v1/coordhostv1connect": {"gen/coordhost/v1", "connectrpc.com/connect"},
			"host/api":                            {"gen/coordhost/v1/coordhostv1connect"},
			"cmd/coordhost":                       {"gen/coordhost/v1"},
		}, nil},
		{"generated API code misused", map[string][]string{
			"gen/coordhost/v1": {"github.com/redis/rueidis", "primitives"},
			"primitives/lock":  {"gen/coordhost/v1"},
			"config":           {"gen/coordhost/v1"},
		}, []string{
			"gen/coordhost/v1 depends on github.com/redis/rueidis",
			"gen/coordhost/v1 imports primitives",
			"primitives/lock imports gen/coordhost/v1",
			"config imports gen/coordhost/v1",
		}},
		{"list errors", map[string][]string{"primitives/lock": {"strings"}}, []string{"primitives/lock: boom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs := graph(tc.edges, "context", "strings", "time", "embed", "os/exec")
			if tc.name == "list errors" {
				for _, p := range pkgs {
					if p.ImportPath == mod+"/primitives/lock" {
						p.Error = &struct{ Err string }{"boom"}
					}
				}
			}
			problems, _ := check(mod, pkgs, rows(), restrictions())
			if len(problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(problems), len(tc.want), strings.Join(problems, "\n"))
			}
			for _, w := range tc.want {
				found := false
				for _, p := range problems {
					found = found || strings.Contains(p, w)
				}
				if !found {
					t.Errorf("no problem contains %q:\n%s", w, strings.Join(problems, "\n"))
				}
			}
		})
	}
}

package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// blockHeads are the blocks that take replicas and replica_timeout, each
// opened with its required arguments on lines 1 to 3 (so the argument
// under test is on line 4); %s is the ttl.
var blockHeads = []struct{ kind, head string }{
	{"lock", "lock \"a\" {\n  ttl = \"%s\"\n\n"},
	{"rwlock", "rwlock \"a\" {\n  ttl = \"%s\"\n\n"},
	{"semaphore", "semaphore \"a\" {\n  capacity = 2\n  ttl = \"%s\"\n"},
	{"lease", "lease \"a\" {\n  ttl = \"%s\"\n\n"},
}

// longTTL is a ttl above every replica_timeout accepted (see
// TestReplicaTimeoutWarning for ttls that are not).
const longTTL = "2m"

// replication returns the Replication the one block of kind in cfg asks
// for.
func replicationOf(cfg *Config, kind string) Replication {
	switch kind {
	case "lock":
		return cfg.Lock("a").Replication
	case "rwlock":
		return cfg.RWLock("a").Replication
	case "semaphore":
		return cfg.Semaphore("a").Replication
	}
	return cfg.Lease("a").Replication
}

func TestReplication(t *testing.T) {
	for _, b := range blockHeads {
		for _, tc := range []struct {
			args string
			want Replication
		}{
			{"", Replication{}},
			{"  replicas = 0\n", Replication{}},
			{"  replicas = 1\n", Replication{Replicas: 1}},
			{"  replicas = 64\n  replica_timeout = \"1m\"\n", Replication{Replicas: 64, ReplicaTimeout: time.Minute}},
			{"  replicas = 2\n  replica_timeout = \"1ms\"\n", Replication{Replicas: 2, ReplicaTimeout: time.Millisecond}},
		} {
			cfg := mustParse(t, fmt.Sprintf(b.head, longTTL)+tc.args+"}\n", LoadOptions{})
			if got := replicationOf(cfg, b.kind); got != tc.want {
				t.Errorf("%s with %q: %+v, want %+v", b.kind, tc.args, got, tc.want)
			}
		}
	}
}

// Each mistake is one diagnostic on the argument's line, naming the block.
func TestReplicationMistakes(t *testing.T) {
	for _, b := range blockHeads {
		for _, tc := range []struct {
			name  string
			args  string
			line  int
			frags []string
		}{
			{"negative replicas", "  replicas = -1\n", 4, []string{"Invalid number", `"replicas" must be a whole number from 0 to 64, not -1`}},
			{"too many replicas", "  replicas = 65\n", 4, []string{"Invalid number", "from 0 to 64, not 65"}},
			{"fractional replicas", "  replicas = 1.5\n", 4, []string{"Invalid number", "not 1.5"}},
			{"replicas as a string", "  replicas = \"one\"\n", 4, []string{"Incorrect attribute value type", `"replicas"`}},
			{"timeout without replicas", "  replica_timeout = \"100ms\"\n", 4, []string{"replica_timeout without replicas", fmt.Sprintf("A %s's replica_timeout", b.kind), "set replicas or remove replica_timeout"}},
			{"timeout with replicas = 0", "  replicas = 0\n  replica_timeout = \"100ms\"\n", 5, []string{"replica_timeout without replicas", "replicas = 0 waits for none"}},
			{"timeout below 1ms", "  replicas = 1\n  replica_timeout = \"500us\"\n", 5, []string{"Invalid replica_timeout", "from 1ms to 1m0s; got 500µs"}},
			{"zero timeout", "  replicas = 1\n  replica_timeout = \"0s\"\n", 5, []string{"Invalid replica_timeout", "got 0s"}},
			{"timeout above 1m", "  replicas = 1\n  replica_timeout = \"2m\"\n", 5, []string{"Invalid replica_timeout", "got 2m0s"}},
			{"negative timeout", "  replicas = 1\n  replica_timeout = \"-1s\"\n", 5, []string{"Invalid duration", "must not be negative"}},
			{"timeout as a word", "  replicas = 1\n  replica_timeout = \"soon\"\n", 5, []string{"Invalid duration", `"soon"`}},
			// A bad replicas is reported once, not again as missing.
			{"bad replicas and a timeout", "  replicas = 99\n  replica_timeout = \"1s\"\n", 4, []string{"Invalid number", "not 99"}},
			{"misspelt", "  replica = 1\n", 4, []string{"Unsupported argument", `Did you mean "replicas"?`}},
		} {
			t.Run(b.kind+"/"+tc.name, func(t *testing.T) {
				cfg, diags := Parse([]byte(fmt.Sprintf(b.head, longTTL)+tc.args+"}\n"), "test.hcl", LoadOptions{})
				out := render(t, cfg, diags)
				if len(diags) != 1 {
					t.Fatalf("got %d diagnostics, want 1:\n%s", len(diags), out)
				}
				d := diags[0]
				if d.Subject == nil || d.Subject.Start.Line != tc.line || d.Subject.Filename != "test.hcl" {
					t.Fatalf("diagnostic at %v, want test.hcl line %d:\n%s", d.Subject, tc.line, out)
				}
				if !containsAll(text(d), tc.frags...) {
					t.Fatalf("diagnostic %q, want fragments %q", text(d), tc.frags)
				}
				if !strings.Contains(out, "replica") {
					t.Fatalf("the rendering shows no snippet:\n%s", out)
				}
			})
		}
	}
}

// A replica_timeout (given, or the default 1s) not below the block's ttl is
// a warning on the argument that sets it: a grant could expire while its
// acquire waits for the replicas.
func TestReplicaTimeoutWarning(t *testing.T) {
	for _, b := range blockHeads {
		kind, head := b.kind, b.head
		for _, tc := range []struct {
			name, ttl, args string
			line            int // of the warning; 0: none
			frags           []string
		}{
			{"default timeout equal to ttl", "1s", "  replicas = 1\n", 4, []string{"waits up to 1s (the default replica_timeout)", "its ttl is 1s"}},
			{"timeout above ttl", "1s", "  replicas = 1\n  replica_timeout = \"2s\"\n", 5, []string{"waits up to 2s (replica_timeout)"}},
			{"timeout below ttl", "1s", "  replicas = 1\n  replica_timeout = \"100ms\"\n", 0, nil},
			{"default timeout below ttl", "30s", "  replicas = 2\n", 0, nil},
			{"no replicas", "1s", "", 0, nil},
		} {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				cfg, diags := Parse([]byte(fmt.Sprintf(head, tc.ttl)+tc.args+"}\n"), "test.hcl", LoadOptions{})
				out := render(t, cfg, diags)
				if diags.HasErrors() {
					t.Fatalf("errors:\n%s", out)
				}
				if tc.line == 0 {
					if len(diags) != 0 {
						t.Fatalf("want no diagnostic:\n%s", out)
					}
					return
				}
				if len(diags) != 1 || diags[0].Severity != hcl.DiagWarning {
					t.Fatalf("want one warning:\n%s", out)
				}
				d := diags[0]
				if d.Subject == nil || d.Subject.Start.Line != tc.line {
					t.Fatalf("warning at %v, want line %d:\n%s", d.Subject, tc.line, out)
				}
				if !containsAll(text(d), append(tc.frags, "This "+kind+" waits")...) {
					t.Fatalf("warning %q, want fragments %q", text(d), tc.frags)
				}
			})
		}
	}
	// A semaphore whose permits never expire has nothing to outlast.
	if _, diags := Parse([]byte("semaphore \"a\" {\n  capacity = 2\n  ttl = \"none\"\n  replicas = 1\n  replica_timeout = \"1m\"\n}\n"), "test.hcl", LoadOptions{}); len(diags) != 0 {
		t.Fatalf("ttl = \"none\": %v", diags)
	}
}

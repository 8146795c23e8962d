package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSentinelBlock(t *testing.T) {
	dir := t.TempDir()
	ca := writeFile(t, dir, "ca.pem", "ca", 0o644)
	cfg, diags := parseIn(t, dir, `
variable "sentinel_password" {
  default = "s3cret"
}
redis {
  sentinel {
    master_set = "orders"
    addresses  = ["10.0.0.1:26379", "sentinel-b.internal:26379", "[::1]:26380"]
    username   = "watcher"
    password   = var.sentinel_password
  }
  username     = "app"
  password     = "app-pass"
  key_prefix   = "svc:"
  client_cache = false
  tls {
    ca_file = "ca.pem"
  }
}
`, LoadOptions{})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	want := &Redis{
		Sentinel: &Sentinel{
			MasterSet: "orders",
			Addresses: []string{"10.0.0.1:26379", "sentinel-b.internal:26379", "[::1]:26380"},
			Username:  "watcher",
			Password:  "s3cret",
		},
		Username:  "app",
		Password:  "app-pass",
		KeyPrefix: "svc:",
		TLS:       &TLS{Enabled: true, CAFile: ca},
	}
	if diff := cmp.Diff(want, cfg.Redis, cmpOpts...); diff != "" {
		t.Errorf("redis (-want +got):\n%s", diff)
	}
	if r := cfg.Redis.Sentinel.Range; r.Start.Line != 6 || !strings.HasSuffix(r.Filename, "coordhost.hcl") {
		t.Errorf("sentinel Range = %v, want line 6", r)
	}

	// The smallest form: one sentinel, no credentials; defaults as without
	// Sentinel.
	cfg = mustParse(t, `
redis {
  sentinel {
    master_set = "mymaster"
    addresses  = ["127.0.0.1:26379"]
  }
}
`, LoadOptions{})
	if r := cfg.Redis; r.Addresses != nil || !r.ClientCache || r.TLS != nil || r.Sentinel == nil ||
		r.Sentinel.MasterSet != "mymaster" || r.Sentinel.Username != "" || r.Sentinel.Password != "" {
		t.Errorf("redis: %+v sentinel %+v", r, r.Sentinel)
	}
}

// TestSentinelMistakes: every mistake in a sentinel block, or in how it sits
// with the redis block's addresses, comes back at its line with words that
// say what to do.
func TestSentinelMistakes(t *testing.T) {
	tests := []mistakeCase{
		{"neither addresses nor sentinel", `redis {
  username = "u"
}`, nil, []wantDiag{want(1, "Missing required argument", `"addresses"`, "sentinel block", "master_set")}},
		{"both addresses and sentinel", `redis {
  addresses = ["r:6379"]
  sentinel {
    master_set = "m"
    addresses  = ["s:26379"]
  }
}`, nil, []wantDiag{want(2, "Conflicting Redis addresses", "not both", "coordhost.hcl:3", `Remove "addresses"`)}},
		{"empty addresses and sentinel", `redis {
  addresses = []
  sentinel {
    master_set = "m"
    addresses  = ["s:26379"]
  }
}`, nil, []wantDiag{want(2, "Conflicting Redis addresses")}},
		{"missing master_set and addresses", `redis {
  sentinel {
  }
}`, nil, []wantDiag{
			want(2, "Missing required argument", `"master_set"`),
			want(2, "Missing required argument", `"addresses"`),
		}},
		{"empty master_set", `redis {
  sentinel {
    master_set = ""
    addresses  = ["s:26379"]
  }
}`, nil, []wantDiag{want(3, "Invalid master_set", "is empty", "sentinel monitor NAME")}},
		{"master_set with a space", `redis {
  sentinel {
    master_set = "my master"
    addresses  = ["s:26379"]
  }
}`, nil, []wantDiag{want(3, "Invalid master_set", `"my master"`, "one word")}},
		{"master_set from a variable", `variable "set" {
  default = "a\tb"
}
redis {
  sentinel {
    master_set = var.set
    addresses  = ["s:26379"]
  }
}`, nil, []wantDiag{want(6, "Invalid master_set", "control character")}},
		{"master_set not a string", `redis {
  sentinel {
    master_set = ["m"]
    addresses  = ["s:26379"]
  }
}`, nil, []wantDiag{want(3, "Incorrect attribute value type", `"master_set"`)}},
		{"no sentinel addresses", `redis {
  sentinel {
    master_set = "m"
    addresses  = []
  }
}`, nil, []wantDiag{want(4, "No sentinel addresses", "26379")}},
		{"bad sentinel addresses", `redis {
  sentinel {
    master_set = "m"
    addresses  = ["s1", "/run/sentinel.sock", "s2:0", "::1:26379", "s3:26379", "s3:26379", "S4:26379", "s4:26379", "s4:26380"]
  }
}`, nil, []wantDiag{
			want(4, "Invalid sentinel address", "Element 0", "missing port"),
			want(4, "Invalid sentinel address", "Element 1", "unix socket", "over TCP"),
			want(4, "Invalid sentinel address", "Element 2", `bad port "0"`),
			want(4, "Invalid sentinel address", "Element 3", "IPv6 address in brackets"),
			want(4, "Duplicate sentinel address", "Elements 4 and 5", `"s3:26379" and "s3:26379"`),
			want(4, "Duplicate sentinel address", "Elements 6 and 7", `"S4:26379" and "s4:26379"`),
		}},
		{"sentinel address not a list", `redis {
  sentinel {
    master_set = "m"
    addresses  = "s:26379"
  }
}`, nil, []wantDiag{want(4, "Incorrect attribute value type", `"addresses"`)}},
		{"duplicate sentinel block", `redis {
  sentinel {
    master_set = "m"
    addresses  = ["s:26379"]
  }
  sentinel {
    master_set = "n"
    addresses  = ["t:26379"]
  }
}`, nil, []wantDiag{want(6, "Duplicate sentinel block", "coordhost.hcl:2")}},
		{"misspelt argument", `redis {
  sentinel {
    master_name = "m"
    addresses   = ["s:26379"]
  }
}`, nil, []wantDiag{
			want(2, "Missing required argument", `"master_set"`),
			want(3, "Unsupported argument", `"master_name"`),
		}},
		{"tls inside sentinel", `redis {
  sentinel {
    master_set = "m"
    addresses  = ["s:26379"]
    tls {}
  }
}`, nil, []wantDiag{want(5, "Unsupported block type", `"tls"`)}},
	}
	runMistakes(t, t.TempDir(), tests)
}

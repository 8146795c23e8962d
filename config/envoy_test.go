package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

const envoyRateLimits = `
rate_limit "per_ip" {
  algorithm = "fixed_window"
  limit     = 10
  window    = "1s"
}
rate_limit "login" {
  algorithm         = "token_bucket"
  limit             = 5
  tokens_per_period = 1
  period            = "1m"
}
`

func TestEnvoyRateLimitBlocks(t *testing.T) {
	cfg := mustParse(t, envoyRateLimits+`
envoy_rate_limit "edge" {
  descriptor {
    entries    = [{ key = "remote_address" }]
    rate_limit = "per_ip"
  }
  descriptor {
    entries    = [{ key = "generic_key", value = "login" }, { key = "remote_address" }]
    rate_limit = "login"
  }
}
envoy_rate_limit "internal" {
  domain = "mesh"
  descriptor {
    entries    = [{ key = "destination_cluster", value = "db" }]
    rate_limit = "per_ip"
  }
}
`, LoadOptions{})
	want := []*EnvoyRateLimit{
		{Name: "edge", Domain: "edge", Descriptors: []*EnvoyDescriptor{
			{Entries: []EnvoyEntry{{Key: "remote_address"}}, RateLimit: "per_ip"},
			{Entries: []EnvoyEntry{{Key: "generic_key", Value: "login"}, {Key: "remote_address"}}, RateLimit: "login"},
		}},
		{Name: "internal", Domain: "mesh", Descriptors: []*EnvoyDescriptor{
			{Entries: []EnvoyEntry{{Key: "destination_cluster", Value: "db"}}, RateLimit: "per_ip"},
		}},
	}
	if diff := cmp.Diff(want, cfg.EnvoyRateLimits, cmpOpts...); diff != "" {
		t.Fatalf("EnvoyRateLimits (-want +got):\n%s", diff)
	}
	if cfg.EnvoyDomain("mesh") != cfg.EnvoyRateLimits[1] || cfg.EnvoyDomain("internal") != nil {
		t.Fatal("EnvoyDomain does not index by domain")
	}
}

// Matching walks entries in order, preferring a given value to any value
// at each position and never backtracking, as envoyproxy/ratelimit does.
func TestEnvoyMatch(t *testing.T) {
	cfg := mustParse(t, envoyRateLimits+`
envoy_rate_limit "edge" {
  descriptor {
    entries    = [{ key = "remote_address" }]
    rate_limit = "per_ip"
  }
  descriptor {
    entries    = [{ key = "generic_key", value = "login" }, { key = "user", value = "admin" }]
    rate_limit = "login"
  }
  descriptor {
    entries    = [{ key = "generic_key" }, { key = "user" }]
    rate_limit = "per_ip"
  }
}
`, LoadOptions{})
	e := cfg.EnvoyDomain("edge")
	for _, c := range []struct {
		keys, values []string
		want         int // index into e.Descriptors, -1 for none
	}{
		{[]string{"remote_address"}, []string{"10.0.0.1"}, 0},
		{[]string{"remote_address", "path"}, []string{"10.0.0.1", "/"}, -1}, // longer than every block
		{[]string{"path"}, []string{"/"}, -1},
		{[]string{"generic_key", "user"}, []string{"login", "admin"}, 1},
		{[]string{"generic_key", "user"}, []string{"other", "bob"}, 2},
		// "login" picks the value-specific branch; its user must then be
		// admin: no backtracking to the any-value block.
		{[]string{"generic_key", "user"}, []string{"login", "bob"}, -1},
		{[]string{"user", "generic_key"}, []string{"admin", "login"}, -1}, // order matters
		{nil, nil, -1},
	} {
		got := e.Match(c.keys, c.values)
		var want *EnvoyDescriptor
		if c.want >= 0 {
			want = e.Descriptors[c.want]
		}
		if got != want {
			t.Errorf("Match(%q, %q) = %+v, want %+v", c.keys, c.values, got, want)
		}
	}
}

func TestEnvoyRateLimitMistakes(t *testing.T) {
	for _, c := range []struct {
		name, src string
		line      int
		frag      string
	}{
		{"unknown rate_limit", `envoy_rate_limit "e" {
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "per_ipp"
  }
}`, 4, `Did you mean "per_ip"?`},
		{"map entries", `envoy_rate_limit "e" {
  descriptor {
    entries    = { remote_address = "*" }
    rate_limit = "per_ip"
  }
}`, 3, "a map has no order"},
		{"empty entries", `envoy_rate_limit "e" {
  descriptor {
    entries    = []
    rate_limit = "per_ip"
  }
}`, 3, "1 to 16 entries"},
		{"no key", `envoy_rate_limit "e" {
  descriptor {
    entries    = [{ value = "x" }]
    rate_limit = "per_ip"
  }
}`, 3, "needs a non-empty key"},
		{"other field", `envoy_rate_limit "e" {
  descriptor {
    entries    = [{ key = "k", rate = 1 }]
    rate_limit = "per_ip"
  }
}`, 3, `has "rate"`},
		{"repeated key", `envoy_rate_limit "e" {
  descriptor {
    entries    = [{ key = "k" }, { key = "k" }]
    rate_limit = "per_ip"
  }
}`, 3, "appears twice"},
		{"duplicate descriptor", `envoy_rate_limit "e" {
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "per_ip"
  }
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "login"
  }
}`, 7, "already matched"},
		{"no descriptor", `envoy_rate_limit "e" {
}`, 1, "at least one descriptor"},
		{"empty domain", `envoy_rate_limit "e" {
  domain = ""
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "per_ip"
  }
}`, 2, "must not be empty"},
		{"duplicate domain", `envoy_rate_limit "e" {
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "per_ip"
  }
}
envoy_rate_limit "f" {
  domain = "e"
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "per_ip"
  }
}`, 8, "already served"},
		{"missing rate_limit", `envoy_rate_limit "e" {
  descriptor {
    entries = [{ key = "k" }]
  }
}`, 2, "rate_limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The rate limits follow, so that lines count from the block.
			cfg, diags := Parse([]byte(c.src+"\n"+envoyRateLimits), "test.hcl", LoadOptions{})
			if len(diags) != 1 || diags[0].Subject == nil || diags[0].Subject.Start.Line != c.line || !containsAll(text(diags[0]), c.frag) {
				t.Fatalf("want one diagnostic on line %d with %q, got:\n%s", c.line, c.frag, render(t, cfg, diags))
			}
		})
	}
}

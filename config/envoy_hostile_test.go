package config

// Hostile tests of envoy_rate_limit blocks and descriptor matching; the
// bugs they found are fixed.

import (
	"strings"
	"testing"
)

func hostileEnvoy(t *testing.T, blocks string) *EnvoyRateLimit {
	t.Helper()
	cfg := mustParse(t, envoyRateLimits+`
envoy_rate_limit "d" {
`+blocks+`
}
`, LoadOptions{})
	return cfg.EnvoyDomain("d")
}

func matchName(e *EnvoyRateLimit, kv ...string) string {
	var ks, vs []string
	for i := 0; i < len(kv); i += 2 {
		ks, vs = append(ks, kv[i]), append(vs, kv[i+1])
	}
	if d := e.Match(ks, vs); d != nil {
		return d.RateLimit + ":" + entriesSig(d.Entries)
	}
	return ""
}

// Requests that no block can match: duplicate keys, too many entries,
// mismatched lengths, keys in another order, a prefix of a block.
func TestEnvoyHostileMatchNothing(t *testing.T) {
	e := hostileEnvoy(t, `
  descriptor {
    entries    = [{ key = "a" }, { key = "b" }]
    rate_limit = "per_ip"
  }
  descriptor {
    entries    = [{ key = "a", value = "1" }]
    rate_limit = "login"
  }`)
	for _, kv := range [][]string{
		{"a", "1", "a", "1"},
		{"b", "1", "a", "1"},
		{"a", "1", "b", "2", "c", "3"},
		{"A", "1"},
		{"a", "1 "},
		{"a", ""},
		{"a\x00", "1"},
	} {
		if got := matchName(e, kv...); got != "" {
			t.Errorf("%q matched %s", kv, got)
		}
	}
	many := make([]string, 2*(MaxEnvoyEntries+1))
	for i := range many {
		many[i] = "k"
	}
	if got := matchName(e, many...); got != "" {
		t.Errorf("17 entries matched %s", got)
	}
	if e.Match([]string{"a"}, []string{"1", "2"}) != nil || e.Match(nil, nil) != nil {
		t.Error("mismatched lengths matched")
	}
}

// Block order never changes the choice: the value-giving block wins at
// its position, whichever comes first in the file.
func TestEnvoyHostileOrderIndependent(t *testing.T) {
	a := `
  descriptor {
    entries    = [{ key = "k" }, { key = "u", value = "x" }]
    rate_limit = "per_ip"
  }`
	b := `
  descriptor {
    entries    = [{ key = "k", value = "v" }, { key = "u" }]
    rate_limit = "login"
  }`
	for _, e := range []*EnvoyRateLimit{hostileEnvoy(t, a+b), hostileEnvoy(t, b+a)} {
		if got := matchName(e, "k", "v", "u", "x"); !strings.HasPrefix(got, "login:") {
			t.Errorf("k=v u=x: %q, want login (first position decides)", got)
		}
		if got := matchName(e, "k", "w", "u", "x"); !strings.HasPrefix(got, "per_ip:") {
			t.Errorf("k=w u=x: %q", got)
		}
		if got := matchName(e, "k", "w", "u", "y"); got != "" {
			t.Errorf("k=w u=y: %q", got)
		}
	}
}

// Odd domains are accepted and indexed as written; two domains differing
// only in escaping stay apart.
func TestEnvoyHostileOddDomains(t *testing.T) {
	cfg := mustParse(t, envoyRateLimits+`
envoy_rate_limit "a" {
  domain = "x y/z&q=%2F"
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "per_ip"
  }
}
envoy_rate_limit "b" {
  domain = "x+y/z&q=/"
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "per_ip"
  }
}
`, LoadOptions{})
	if cfg.EnvoyDomain("x y/z&q=%2F") == nil || cfg.EnvoyDomain("x+y/z&q=/") == nil || cfg.EnvoyDomain("x y/z&q=/") != nil {
		t.Fatal("odd domains not indexed as written")
	}
}

// Matching is envoyproxy/ratelimit's tree except that only blocks as long
// as the request's descriptor take part (the documented difference, found
// by the hostile pass): a 1-entry block k1=x does not shadow a 2-entry
// any-value block for a request (k1=x, k2=z), as its tree node would in
// envoyproxy/ratelimit.
func TestEnvoyHostileTreeShadowing(t *testing.T) {
	e := hostileEnvoy(t, `
  descriptor {
    entries    = [{ key = "k1", value = "x" }]
    rate_limit = "login"
  }
  descriptor {
    entries    = [{ key = "k1" }, { key = "k2" }]
    rate_limit = "per_ip"
  }`)
	if got := matchName(e, "k1", "x", "k2", "z"); !strings.HasPrefix(got, "per_ip:") {
		t.Errorf("k1=x k2=z: %q, want the 2-entry block (a shorter block never shadows a longer one)", got)
	}
	if got := matchName(e, "k1", "x"); !strings.HasPrefix(got, "login:") {
		t.Errorf("k1=x: %q, want the 1-entry block", got)
	}
}

// FINDING 4: value = "" is accepted and silently means any value (the
// zero EnvoyEntry.Value), so a block written to match only empty values
// matches every value.
func TestEnvoyHostileEmptyValue(t *testing.T) {
	_, diags := Parse([]byte(envoyRateLimits+`
envoy_rate_limit "d" {
  descriptor {
    entries    = [{ key = "k", value = "" }]
    rate_limit = "per_ip"
  }
}
`), "test.hcl", LoadOptions{})
	if !diags.HasErrors() {
		t.Fatal(`value = "" accepted: it matches every value, not just ""`)
	}
}

package e2e

import (
	"regexp"
	"testing"
)

// rlsOverall matches the overall code in client_cmd's output, which prints
// the response with the generated message's String (prototext, whose
// spacing varies on purpose).
var rlsOverall = regexp.MustCompile(`response:\s*overall_code:\s*(\w+)`)

// rlsCheck runs envoyproxy/ratelimit's client_cmd against d's Envoy
// rate-limit service: one ShouldRateLimit for domain with one descriptor
// per element of descriptors ("key=value,key=value", client_cmd's own
// syntax), and returns the overall code it printed.
func (d *daemon) rlsCheck(t *testing.T, domain string, descriptors ...string) string {
	t.Helper()
	args := []string{"-dial_string", d.Addr, "-domain", domain}
	for _, desc := range descriptors {
		args = append(args, "-descriptors", desc)
	}
	r := runClient(t, "", need(t, rlsClient), args...)
	m := rlsOverall.FindStringSubmatch(r.Stdout)
	if r.Code != 0 || m == nil {
		t.Fatalf("client_cmd %v: %s", args, r)
	}
	return m[1]
}

// envoyproxy/ratelimit's own client against the Envoy RLS: a configured
// descriptor allows 2 per user and then is OVER_LIMIT; another user has
// his own count; an unknown descriptor and an unknown domain are OK (as
// envoyproxy/ratelimit allows them).
func TestEnvoyRLSClientCmd(t *testing.T) {
	t.Parallel()
	need(t, rlsClient)
	d := startDaemon(t, rateLimitHCL)
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		if got := d.rlsCheck(t, "edge", "generic_key=checkout,user=alice"); got != want {
			t.Errorf("call %d for alice: %s, want %s", i+1, got, want)
		}
	}
	if got := d.rlsCheck(t, "edge", "generic_key=checkout,user=bob"); got != "OK" {
		t.Errorf("bob: %s, want OK", got)
	}
	// Any descriptor over its limit makes the whole answer OVER_LIMIT.
	if got := d.rlsCheck(t, "edge", "generic_key=checkout,user=bob", "generic_key=checkout,user=alice"); got != "OVER_LIMIT" {
		t.Errorf("bob and alice: %s, want OVER_LIMIT", got)
	}
	for _, unknown := range []struct{ domain, desc string }{
		{"edge", "generic_key=nothing,user=alice"},
		{"edge", "remote_address=10.0.0.1"},
		{"no-such-domain", "generic_key=checkout,user=alice"},
	} {
		for range 3 {
			if got := d.rlsCheck(t, unknown.domain, unknown.desc); got != "OK" {
				t.Fatalf("domain %q descriptor %q: %s, want OK", unknown.domain, unknown.desc, got)
			}
		}
	}
}

package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// checkLineServerRE is the stdout line of limit check -server: that of
// the in-process form without window (the daemon does not say it).
var checkLineServerRE = regexp.MustCompile(`^(granted|refused) rate_limit="([^"]*)" n=(\d+) remaining=(\d+) retry_after=(\S+) reset_after=(\S+) limit=(\d+)\n$`)

// limit check -server: grants up to the limit per tenant (exit 0),
// refusals (exit 1) with retry_after, a request above the limit, and
// errors (exit 2): an unknown name, a partition policy that finds no key
// (nothing written), an unreachable daemon.
func TestLimitCheckServer(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil, nil)
	ctx := context.Background()
	check := limitChecker(checkLineServerRE, "-server", d.url)

	t.Run("granted, then refused", func(t *testing.T) {
		m := check(t, exitGranted, "-attr", "tenant=acme", "checkout")
		if m[1] != "granted" || m[2] != "checkout" || m[3] != "1" || m[4] != "1" || m[5] != "0s" || m[7] != "2" {
			t.Fatalf("first: %q", m[0])
		}
		if r := dur(t, m[6]); r <= 59*time.Minute || r > time.Hour+time.Millisecond {
			t.Fatalf("reset_after %v of a fresh hour window", r)
		}
		if m := check(t, exitGranted, "checkout", "-attr", "tenant=acme"); m[4] != "0" {
			t.Fatalf("second: %q", m[0])
		}
		m = check(t, exitRefused, "-attr", "tenant=acme", "checkout")
		if m[1] != "refused" || m[4] != "0" || dur(t, m[5]) <= 59*time.Minute {
			t.Fatalf("third: %q", m[0])
		}
		// Another tenant has its own window.
		check(t, exitGranted, "-attr", "tenant=other", "-n", "2", "checkout")
		if !d.exists(t, "coordhost:ratelimit:fixed_window:checkout/tenant:acme") {
			t.Fatal("no window key")
		}
		check(t, exitGranted, "global")
		check(t, exitRefused, "global")
	})

	t.Run("more than the limit", func(t *testing.T) { checkAboveLimit(t, "-server", d.url) })

	t.Run("errors", func(t *testing.T) {
		before := d.redis.MustCmd(t, "DBSIZE")
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"-server", d.url, "nope"}, []string{`coordhost: limit check: rate_limit "nope": the daemon at ` + d.url + ` answered not found (name not configured): `,
				"Run 'coordhost limit check -h' for usage."}},
			{[]string{"-server", d.url, "\x1b]0;x\x07"}, []string{`rate_limit "\x1b]0;x\a": the daemon at `}},
			{[]string{"-server", d.url, "checkout"}, []string{`coordhost: limit check: rate_limit "checkout": the daemon at ` + d.url +
				` answered invalid argument (field "attributes"): attributes: `, `needs a non-empty attribute "tenant"`}},
			{[]string{"-server", d.url, "-attr", "tenant=", "checkout"}, []string{`answered invalid argument (field "attributes")`}},
			// Above the daemon's maximum cost (config.MaxRateLimit); in process,
			// a refusal.
			{[]string{"-server", d.url, "-n", "2000000000000000000", "global"}, []string{`answered invalid argument (field "cost"): cost: `}},
			{[]string{"-server", "http://127.0.0.1:1", "global"}, []string{`coordhost: limit check: rate_limit "global": calling the daemon at http://127.0.0.1:1: `}},
		} {
			te := newTestEnv(t, nil)
			code := run(ctx, append([]string{"limit", "check"}, tc.args...), te.env)
			if code != exitCheckError || te.out.String() != "" {
				t.Fatalf("%q: exit status %d, want 2; stdout %q; stderr:\n%s", tc.args, code, te.out, te.errOut)
			}
			wantStderr(t, te, tc.want...)
			if strings.ContainsAny(te.errOut.String(), "\x1b\a") {
				t.Errorf("stderr carries control characters: %q", te.errOut)
			}
		}
		if after := d.redis.MustCmd(t, "DBSIZE"); after != before {
			t.Fatalf("DBSIZE %s -> %s", before, after)
		}
	})
}

package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// limitConfig declares rate_limit "checkout" (a fixed window of 2 per
// hour per tenant) and "global" (a token bucket of 1, unpartitioned).
const limitConfig = `
policy "partition" "tenant" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}

rate_limit "checkout" {
  algorithm = "fixed_window"
  limit     = 2
  window    = "1h"
  partition = policy.partition.tenant
}

rate_limit "global" {
  algorithm         = "token_bucket"
  limit             = 1
  tokens_per_period = 1
  period            = "1h"
}
`

func TestParseLimitCheckArgs(t *testing.T) {
	a, err := parseLimitCheckArgs([]string{"-attr", "tenant=acme", "checkout", "-config", "c.hcl", "-n", "3", "-var", "x=1",
		"-attr", "tenant=other", "-attr", "q=a=b", "-redis", "/tmp/r.sock"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if a.name != "checkout" || a.n != 3 || a.target.configPath != "c.hcl" || a.target.redisFrom != "-redis" || a.target.redisDesc != "unix socket /tmp/r.sock" ||
		len(a.attrs) != 2 || a.attrs["tenant"] != "other" || a.attrs["q"] != "a=b" || a.target.load.Vars["x"].AsString() != "1" {
		t.Fatalf("%+v", a)
	}
	if a, err := parseLimitCheckArgs([]string{"-config=c.hcl", "x"}, noEnv); err != nil || a.n != 1 || a.attrs != nil || a.target.redis != "" {
		t.Fatalf("defaults: %+v, %v", a, err)
	}
	a, err = parseLimitCheckArgs([]string{"-config=c.hcl", "-n=0", "x"}, envOf(map[string]string{envRedisURL: "127.0.0.1:6390"}))
	if err != nil || a.n != 0 || a.target.redisFrom != envRedisURL || !strings.Contains(a.target.redisDesc, "(from "+envRedisURL+")") {
		t.Fatalf("-n 0 and the environment: %+v, %v", a, err)
	}
}

// Bad command lines exit 2 with a message naming the mistake, before
// anything reaches Redis.
func TestLimitCheckUsageErrors(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	path := writeConfig(t, redisBlock(d.Socket())+limitConfig)
	noRedis := writeConfig(t, limitConfig)
	bad := writeConfig(t, redisBlock(d.Socket())+"rate_limit \"x\" {\n  algorithm = \"fixed_window\"\n  limit = 0\n  window = \"1s\"\n}\n")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no NAME", []string{"-config", path}, []string{"missing rate_limit NAME"}},
		{"two NAMEs", []string{"-config", path, "checkout", "global"}, []string{`unexpected argument "global"`}},
		{"empty NAME", []string{"-config", path, ""}, []string{"NAME is empty"}},
		{"no -config", []string{"checkout"}, []string{"missing -config FILE"}},
		{"empty -config", []string{"-config", "", "checkout"}, []string{"-config FILE is empty"}},
		{"negative -n", []string{"-config", path, "-n", "-1", "-attr", "tenant=a", "checkout"}, []string{"-n must not be negative, got -1"}},
		{"-n not a number", []string{"-config", path, "-n", "two", "checkout"}, []string{`-n "two": want a whole number`}},
		{"-n too large", []string{"-config", path, "-n", "99999999999999999999", "checkout"}, []string{`-n "99999999999999999999": want a whole number`}},
		{"-attr without =", []string{"-config", path, "-attr", "tenant", "checkout"}, []string{`-attr "tenant": want KEY=VALUE`}},
		{"-attr with an empty KEY", []string{"-config", path, "-attr", "=acme", "checkout"}, []string{`-attr "=acme": empty KEY`}},
		{"bad -var", []string{"-config", path, "-var", "novalue", "checkout"}, []string{"-var"}},
		{"empty -redis", []string{"-config", path, "-redis", "", "checkout"}, []string{"-redis: empty address"}},
		{"unknown flag", []string{"-config", path, "-wait", "1s", "checkout"}, []string{"flag provided but not defined: -wait"}},
		{"unknown NAME", []string{"-config", path, "chekout"}, []string{`has no rate_limit "chekout" (it declares "checkout", "global")`}},
		{"-attr without a partition policy", []string{"-config", path, "-attr", "tenant=a", "global"}, []string{`rate_limit "global" has no partition policy`}},
		{"no redis block", []string{"-config", noRedis, "global"}, []string{"has no redis block", "-redis ADDR"}},
		{"a mistake in FILE", []string{"-config", bad, "x"}, []string{"Invalid limit", "   6:   limit = 0", "limit check: " + bad + ": 1 error"}},
		{"a missing FILE", []string{"-config", path + ".nope", "x"}, []string{"limit check: " + path + ".nope: 1 error"}},
		{"a NAME that steers the terminal", []string{"-config", path, "\x1b[2Jx\ny"}, []string{`has no rate_limit "\x1b[2Jx\ny"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), append([]string{"limit", "check"}, tc.args...), te.env)
			if code != exitCheckError {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitCheckError, te.errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(te.errOut.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, te.errOut)
				}
			}
			if te.out.String() != "" {
				t.Errorf("stdout = %q", te.out)
			}
			if strings.ContainsAny(te.errOut.String(), "\x1b\r") {
				t.Errorf("stderr carries control characters: %q", te.errOut)
			}
		})
	}
	if n, err := c.Do(context.Background(), c.B().Dbsize().Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("DBSIZE %d (%v) after refused command lines", n, err)
	}
}

// limitChecker returns check(t, wantCode, args...): it runs `coordhost
// limit check FLAGS... ARGS...`, fails unless the exit status is wantCode,
// stdout is a line that line matches and a grant wrote nothing to stderr,
// and returns line's submatches.
func limitChecker(line *regexp.Regexp, flags ...string) func(t *testing.T, wantCode int, args ...string) []string {
	return func(t *testing.T, wantCode int, args ...string) []string {
		t.Helper()
		te := newTestEnv(t, nil)
		code := run(context.Background(), append(append([]string{"limit", "check"}, flags...), args...), te.env)
		if code != wantCode {
			t.Fatalf("limit check %q: exit status %d, want %d; stdout %q; stderr:\n%s", args, code, wantCode, te.out, te.errOut)
		}
		m := line.FindStringSubmatch(te.out.String())
		if m == nil {
			t.Fatalf("limit check %q: stdout %q", args, te.out)
		}
		if wantCode == exitGranted && te.errOut.String() != "" {
			t.Errorf("stderr of a grant: %q", te.errOut)
		}
		return m
	}
}

// dur parses a duration of a limit check line.
func dur(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkAboveLimit runs `coordhost limit check FLAGS... -n 3 -attr
// tenant=third checkout`, 3 permits of limitConfig's checkout (limit 2):
// refused, and said never to be granted.
func checkAboveLimit(t *testing.T, flags ...string) {
	t.Helper()
	te := newTestEnv(t, nil)
	code := run(context.Background(), append(append([]string{"limit", "check"}, flags...), "-n", "3", "-attr", "tenant=third", "checkout"), te.env)
	if code != exitRefused || !strings.HasPrefix(te.out.String(), `refused rate_limit="checkout" n=3 remaining=2 retry_after=0s`) ||
		!strings.Contains(te.errOut.String(), `3 permits exceed the limit 2 of rate_limit "checkout": never granted`) {
		t.Fatalf("exit status %d; stdout %q; stderr:\n%s", code, te.out, te.errOut)
	}
}

var checkLineRE = regexp.MustCompile(`^(granted|refused) rate_limit="([^"]*)" n=(\d+) remaining=(\d+) retry_after=(\S+) reset_after=(\S+) limit=(\d+) window=(\S+)\n$`)

// TestLimitCheck runs limit check end to end on a test server: grants up to
// the limit per tenant (exit 0), then refusals (exit 1) with retry_after,
// a request above the limit, -n 0, and a partition policy that gives no key
// (exit 2, nothing written).
func TestLimitCheck(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	path := writeConfig(t, redisBlock(d.Socket())+limitConfig)
	ctx := context.Background()
	check := limitChecker(checkLineRE, "-config", path)

	t.Run("granted, then refused", func(t *testing.T) {
		m := check(t, exitGranted, "-attr", "tenant=acme", "checkout")
		if m[1] != "granted" || m[2] != "checkout" || m[3] != "1" || m[4] != "1" || m[5] != "0s" || m[7] != "2" || m[8] != "1h0m0s" {
			t.Fatalf("first: %q", m[0])
		}
		if r := dur(t, m[6]); r <= 59*time.Minute || r > time.Hour+time.Millisecond {
			t.Fatalf("reset_after %v of a fresh hour window", r)
		}
		if m := check(t, exitGranted, "checkout", "-attr", "tenant=acme"); m[4] != "0" {
			t.Fatalf("second: %q", m[0])
		}
		m = check(t, exitRefused, "-attr", "tenant=acme", "checkout")
		if m[1] != "refused" || m[4] != "0" || dur(t, m[5]) <= 59*time.Minute || m[5] != m[6] {
			t.Fatalf("third: %q", m[0])
		}
		// Another tenant has its own window.
		check(t, exitGranted, "-attr", "tenant=other", "-n", "2", "checkout")
		if got := c.Do(ctx, c.B().Get().Key("coordhost:ratelimit:fixed_window:checkout/tenant:acme").Build()); got.Error() != nil {
			t.Fatalf("the window's key: %v", got.Error())
		}
	})

	t.Run("more than the limit", func(t *testing.T) { checkAboveLimit(t, "-config", path) })

	t.Run("n 0 consumes nothing", func(t *testing.T) {
		for range 3 {
			if m := check(t, exitGranted, "-n", "0", "global"); m[4] != "1" {
				t.Fatalf("-n 0: %q", m[0])
			}
		}
		check(t, exitGranted, "global")
		check(t, exitRefused, "-n", "0", "global")
	})

	t.Run("partition fails closed", func(t *testing.T) {
		before, _ := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
		for _, args := range [][]string{{"checkout"}, {"-attr", "tenant=", "checkout"}, {"-attr", "user=x", "checkout"}} {
			te := newTestEnv(t, nil)
			code := run(ctx, append([]string{"limit", "check", "-config", path}, args...), te.env)
			if code != exitCheckError || te.out.String() != "" || !strings.Contains(te.errOut.String(), `coordhost: limit check: rate_limit "checkout": policies: partition key unavailable`) {
				t.Fatalf("%q: exit status %d; stdout %q; stderr:\n%s", args, code, te.out, te.errOut)
			}
		}
		if after, _ := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); after != before {
			t.Fatalf("DBSIZE %d -> %d", before, after)
		}
	})

	t.Run("Redis unreachable", func(t *testing.T) {
		te := newTestEnv(t, nil)
		code := run(ctx, []string{"limit", "check", "-config", path, "-redis", "/nonexistent/redis.sock", "global"}, te.env)
		if code != exitCheckError || te.out.String() != "" || !strings.Contains(te.errOut.String(), "connecting to Redis at unix socket /nonexistent/redis.sock") {
			t.Fatalf("exit status %d; stdout %q; stderr:\n%s", code, te.out, te.errOut)
		}
	})
}

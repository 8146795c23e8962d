package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coordhost/coordhost/host/devredis"
)

// noEnv is a getenv with nothing set.
func noEnv(string) string { return "" }

// envOf returns a getenv that sees only vars.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestParseHoldArgsBad(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string            // substring of the error
		env  map[string]string // the environment
		not  string            // must not be in the error
	}{
		{name: "no arguments", args: nil, want: "missing lock NAME"},
		{name: "only flags", args: []string{"-ttl", "5s"}, want: "missing lock NAME"},
		{name: "missing NAME before --", args: []string{"--", "true"}, want: "missing lock NAME"},
		{name: "missing -- and CMD", args: []string{"job"}, want: `missing "--" and CMD`},
		{name: "missing --", args: []string{"job", "echo", "hi"}, want: `missing "--" between NAME and CMD (got "echo"`},
		{name: "missing CMD", args: []string{"job", "--"}, want: "missing CMD after --"},
		{name: "empty CMD", args: []string{"job", "--", ""}, want: "CMD is an empty string"},
		{name: "two names", args: []string{"a", "b", "--", "true"}, want: `unexpected argument "b" before --`},
		{name: "empty NAME", args: []string{"", "--", "true"}, want: "lock NAME is empty"},
		{name: "ttl zero", args: []string{"-ttl", "0s", "job", "--", "true"}, want: "-ttl must be at least 1ms, got 0s"},
		{name: "ttl negative", args: []string{"-ttl", "-1s", "job", "--", "true"}, want: "-ttl must be at least 1ms, got -1s"},
		{name: "ttl below 1ms", args: []string{"-ttl", "500us", "job", "--", "true"}, want: "-ttl must be at least 1ms"},
		{name: "ttl above MaxTTL", args: []string{"-ttl", "1000000h", "job", "--", "true"}, want: "-ttl must be at most 876000h0m0s (100 years), got 1000000h0m0s"},
		// Every duration flag says what a duration looks like.
		{name: "ttl not a duration", args: []string{"-ttl", "soon", "job", "--", "true"},
			want: `-ttl "soon": not a duration; a duration looks like 5s, 500ms, 1m or 1h30m`},
		{name: "ttl without unit", args: []string{"-ttl", "5", "job", "--", "true"},
			want: `-ttl "5": a duration needs a unit, like 5s, 500ms or 1m`},
		{name: "ttl without unit, equals form", args: []string{"-ttl=1.5", "job", "--", "true"},
			want: `-ttl "1.5": a duration needs a unit, like 5s, 500ms or 1m`},
		{name: "ttl unknown unit", args: []string{"-ttl", "5sec", "job", "--", "true"},
			want: `-ttl "5sec": unknown unit; a duration looks like 5s, 500ms, 1m or 1h30m (units ns, us, ms, s, m, h)`},
		{name: "ttl empty", args: []string{"-ttl", "", "job", "--", "true"}, want: `-ttl "": empty; a duration looks like 5s, 500ms or 1m`},
		{name: "ttl too long", args: []string{"-ttl", "9999999h", "job", "--", "true"}, want: `-ttl "9999999h": too long`},
		{name: "wait negative", args: []string{"-wait", "-1s", "job", "--", "true"}, want: "-wait must not be negative"},
		{name: "wait not a duration", args: []string{"-wait", "x", "job", "--", "true"}, want: `-wait "x": not a duration; a duration looks like`},
		{name: "wait without unit", args: []string{"job", "-wait", "10", "--", "true"}, want: `-wait "10": a duration needs a unit, like 5s, 500ms or 1m`},
		{name: "unknown flag", args: []string{"-bogus", "job", "--", "true"}, want: "flag provided but not defined: -bogus", not: "did you mean"},
		{name: "unknown flag after NAME", args: []string{"job", "-bogus", "--", "true"}, want: "flag provided but not defined: -bogus"},
		{name: "misspelt flag", args: []string{"-tll", "5s", "job", "--", "true"}, want: "flag provided but not defined: -tll (did you mean -ttl?)"},
		{name: "misspelt flag, double dash", args: []string{"--reddis", "x", "job", "--", "true"}, want: "flag provided but not defined: -reddis (did you mean -redis?)"},
		{name: "flag missing value", args: []string{"job", "-ttl"}, want: "flag needs an argument: -ttl"},
		{name: "empty prefix", args: []string{"-prefix", "", "job", "--", "true"}, want: "-prefix must not be empty"},
		{name: "fencing with value", args: []string{"-fencing=maybe", "job", "--", "true"}, want: `-fencing "maybe": want true or false, or the flag alone for true`},
		{name: "redis not host:port", args: []string{"-redis", "localhost", "job", "--", "true"}, want: `-redis: "localhost" is not host:port`},
		{name: "redis empty", args: []string{"-redis", "", "job", "--", "true"}, want: "-redis: empty address"},
		{name: "redis bad port", args: []string{"-redis", "localhost:http", "job", "--", "true"}, want: `bad port "http"`},
		{name: "redis port out of range", args: []string{"-redis", "localhost:70000", "job", "--", "true"}, want: `bad port "70000"`},
		{name: "redis missing host", args: []string{"-redis", ":6379", "job", "--", "true"}, want: "missing host"},
		{name: "redis relative unix", args: []string{"-redis", "unix://redis.sock", "job", "--", "true"}, want: "needs an absolute path"},
		{name: "redis bad scheme", args: []string{"-redis", "http://x:1", "job", "--", "true"}, want: "invalid URL scheme"},
		{name: "redis socket path too long", args: []string{"-redis", "/" + strings.Repeat("x", 120), "job", "--", "true"}, want: "too long"},
		// A password never reaches the terminal, however the URL is wrong.
		{name: "redis URL bad port, password hidden", args: []string{"-redis", "redis://u:hunter2@db:port", "job", "--", "true"},
			want: `-redis: "redis://u:xxxxx@db:port": invalid port`, not: "hunter2"},
		{name: "redis URL bad escape, password hidden", args: []string{"-redis", "redis://:hunter2%zz@db:1", "job", "--", "true"},
			want: `"redis://:xxxxx@db:1"`, not: "hunter2"},
		{name: "redis URL bad db, password hidden", args: []string{"-redis", "redis://u:hunter2@db:1/x", "job", "--", "true"},
			want: `"redis://u:xxxxx@db:1/x": redis: invalid database number`, not: "hunter2"},
		{name: "redis URL password with #, hidden", args: []string{"-redis", "redis://default:hunter2#1@127.0.0.1:6379", "job", "--", "true"},
			want: `"redis://default:xxxxx@127.0.0.1:6379"`, not: "hunter2"},
		{name: "redis URL password with ?, hidden", args: []string{"-redis", "redis://u:hun?ter2@db:1", "job", "--", "true"},
			want: `"redis://u:xxxxx@db:1"`, not: "ter2"},
		{name: "redis URL password with /, hidden", args: []string{"-redis", "redis://:S3cr/t2@db:1/0", "job", "--", "true"},
			want: `"redis://:xxxxx@db:1/0"`, not: "S3cr"},
		{name: "redis credentials without scheme", args: []string{"-redis", "u:hunter2@db", "job", "--", "true"},
			want: `-redis: "xxxxx@db": credentials go in a URL, as in redis://user:pass@host:port`, not: "hunter2"},
		// COORDHOST_REDIS_URL is checked as -redis is, and named.
		{name: "env not host:port", args: []string{"job", "--", "true"}, env: map[string]string{envRedisURL: "localhost"},
			want: `COORDHOST_REDIS_URL: "localhost" is not host:port`},
		{name: "env bad URL, password hidden", args: []string{"job", "--", "true"}, env: map[string]string{envRedisURL: "redis://:hunter2@db:port"},
			want: `COORDHOST_REDIS_URL: "redis://:xxxxx@db:port"`, not: "hunter2"},
		{name: "bad -redis wins over good env", args: []string{"-redis", "nohost", "job", "--", "true"}, env: map[string]string{envRedisURL: "127.0.0.1:6379"},
			want: `-redis: "nohost" is not host:port`},
		{name: "config empty", args: []string{"-config", "", "job", "--", "true"}, want: "-config FILE is empty"},
		{name: "config missing value", args: []string{"job", "-config"}, want: "flag needs an argument: -config"},
		{name: "ttl with config", args: []string{"-config", "c.hcl", "-ttl", "5s", "job", "--", "true"}, want: `-ttl cannot be used with -config: lock "job" of the file sets it`},
		{name: "fencing with config", args: []string{"-config", "c.hcl", "job", "-fencing", "--", "true"}, want: "-fencing cannot be used with -config"},
		{name: "fencing=false with config", args: []string{"-config", "c.hcl", "-fencing=false", "job", "--", "true"}, want: "-fencing cannot be used with -config"},
		{name: "prefix with config", args: []string{"-config", "c.hcl", "-prefix", "p:", "job", "--", "true"}, want: "-prefix cannot be used with -config"},
		{name: "var without config", args: []string{"-var", "a=b", "job", "--", "true"}, want: "-var needs -config FILE"},
		{name: "attr without config", args: []string{"-attr", "tenant=acme", "job", "--", "true"}, want: "-attr needs -config FILE"},
		{name: "var without =", args: []string{"-config", "c.hcl", "-var", "ttl", "job", "--", "true"}, want: `-var "ttl": want NAME=VALUE`},
		{name: "var bad name", args: []string{"-config", "c.hcl", "-var", "1x=2", "job", "--", "true"}, want: `"1x" is not a valid variable name`},
		{name: "attr without =", args: []string{"-config", "c.hcl", "-attr", "tenant", "job", "--", "true"}, want: `-attr "tenant": want KEY=VALUE`},
		{name: "attr empty key", args: []string{"-config", "c.hcl", "-attr", "=acme", "job", "--", "true"}, want: `-attr "=acme": empty KEY`},
		{name: "redis bad with config", args: []string{"-config", "c.hcl", "-redis", "nohost", "job", "--", "true"}, want: "is not host:port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseHoldArgs(tc.args, envOf(tc.env))
			if err == nil {
				t.Fatalf("parseHoldArgs(%q) = nil error, want %q", tc.args, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseHoldArgs(%q) error = %q, want it to contain %q", tc.args, err, tc.want)
			}

			// The same through the command: exit 2, message on stderr,
			// nothing started (no redis-server needed for any of these).
			te := newTestEnv(t, tc.env)
			code := run(context.Background(), append([]string{"lock", "hold"}, tc.args...), te.env)
			if code != exitUsage {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitUsage, te.errOut)
			}
			want := "coordhost: lock hold: " + err.Error() + "\nRun 'coordhost lock hold -h' for usage.\n"
			if te.errOut.String() != want {
				t.Fatalf("stderr = %q, want %q", te.errOut, want)
			}
			if tc.not != "" && strings.Contains(te.errOut.String(), tc.not) {
				t.Fatalf("stderr %q contains %q", te.errOut, tc.not)
			}
		})
	}
}

func TestParseHoldArgsGood(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want holdConfig
	}{
		{"defaults", []string{"job", "--", "echo", "hi"},
			holdConfig{ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"echo", "hi"}}},
		{"flags before NAME", []string{"-ttl", "2s", "-wait=3s", "-fencing", "-prefix", "p:", "job", "--", "true"},
			holdConfig{ttl: 2 * time.Second, wait: 3 * time.Second, fencing: true, prefix: "p:", name: "job", argv: []string{"true"}}},
		{"flags after NAME", []string{"job", "-ttl", "1ms", "-fencing", "--", "true"},
			holdConfig{ttl: time.Millisecond, fencing: true, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"CMD args look like flags and --", []string{"job", "--", "sh", "-c", "echo -- -ttl 0s", "--"},
			holdConfig{ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"sh", "-c", "echo -- -ttl 0s", "--"}}},
		{"double-dash flags", []string{"--ttl=4s", "job", "--", "true"},
			holdConfig{ttl: 4 * time.Second, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"tcp address", []string{"-redis", "127.0.0.1:6379", "job", "--", "true"},
			holdConfig{redis: "127.0.0.1:6379", redisFrom: "-redis", redisDesc: "127.0.0.1:6379", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"ipv6 address", []string{"-redis", "[::1]:6379", "job", "--", "true"},
			holdConfig{redis: "[::1]:6379", redisFrom: "-redis", redisDesc: "[::1]:6379", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"socket path", []string{"-redis", "/run/redis/redis.sock", "job", "--", "true"},
			holdConfig{redis: "/run/redis/redis.sock", redisFrom: "-redis", redisDesc: "unix socket /run/redis/redis.sock", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"unix URL", []string{"-redis", "unix:///run/redis/redis.sock", "job", "--", "true"},
			holdConfig{redis: "unix:///run/redis/redis.sock", redisFrom: "-redis", redisDesc: "unix socket /run/redis/redis.sock", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"redis URL", []string{"-redis", "redis://:secret@db.example:6380/2", "job", "--", "true"},
			holdConfig{redis: "redis://:secret@db.example:6380/2", redisFrom: "-redis", redisDesc: "db.example:6380", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHoldArgs(tc.args, noEnv)
			if err != nil {
				t.Fatalf("parseHoldArgs(%q): %v", tc.args, err)
			}
			if got.redis != tc.want.redis || got.redisFrom != tc.want.redisFrom || got.redisDesc != tc.want.redisDesc || got.ttl != tc.want.ttl ||
				got.wait != tc.want.wait || got.prefix != tc.want.prefix || got.fencing != tc.want.fencing ||
				got.name != tc.want.name || !slices.Equal(got.argv, tc.want.argv) {
				t.Fatalf("parseHoldArgs(%q) =\n %+v\nwant\n %+v", tc.args, got, tc.want)
			}
			if got.redis != "" {
				if len(got.redisOpt.InitAddress) != 1 {
					t.Fatalf("InitAddress = %q", got.redisOpt.InitAddress)
				}
				unix := strings.HasPrefix(got.redisDesc, "unix socket ")
				if unix != (got.redisOpt.DialCtxFn != nil) || unix != got.redisOpt.ForceSingleClient {
					t.Fatalf("unix=%v but DialCtxFn set=%v ForceSingleClient=%v", unix, got.redisOpt.DialCtxFn != nil, got.redisOpt.ForceSingleClient)
				}
			}
		})
	}
	if _, err := parseHoldArgs([]string{"-h"}, noEnv); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: err = %v, want flag.ErrHelp", err)
	}
}

// TestParseHoldArgsRedisEnv: COORDHOST_REDIS_URL names the server when
// -redis is not given, credentials included; -redis wins over it.
func TestParseHoldArgsRedisEnv(t *testing.T) {
	env := envOf(map[string]string{envRedisURL: "redis://app:s3cret@db.example:6380/2"})
	got, err := parseHoldArgs([]string{"job", "--", "true"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if got.redis != "redis://app:s3cret@db.example:6380/2" || got.redisFrom != envRedisURL ||
		got.redisDesc != "db.example:6380 (from COORDHOST_REDIS_URL)" ||
		got.redisOpt.Username != "app" || got.redisOpt.Password != "s3cret" || got.redisOpt.SelectDB != 2 {
		t.Fatalf("from the environment: %+v", got)
	}
	got, err = parseHoldArgs([]string{"-redis", "127.0.0.1:6379", "job", "--", "true"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if got.redis != "127.0.0.1:6379" || got.redisFrom != "-redis" || got.redisDesc != "127.0.0.1:6379" || got.redisOpt.Password != "" {
		t.Fatalf("-redis over the environment: %+v", got)
	}
	// An empty variable is no variable: dev mode.
	got, err = parseHoldArgs([]string{"job", "--", "true"}, envOf(map[string]string{envRedisURL: ""}))
	if err != nil || got.redis != "" {
		t.Fatalf("empty variable: %+v, %v", got, err)
	}
}

func TestTopLevel(t *testing.T) {
	cases := []struct {
		args   []string
		code   int
		stdout string
		stderr string
		not    string // in neither stdout nor stderr
	}{
		{args: nil, code: exitUsage, stderr: "Usage:\n  coordhost serve [flags] FILE\n"},
		{args: []string{"help"}, code: exitOK, stdout: "Usage:\n  coordhost serve [flags] FILE\n"},
		{args: []string{"-h"}, code: exitOK, stdout: "Run 'coordhost COMMAND -h'"},
		{args: []string{"--help"}, code: exitOK, stdout: "coordhost lock hold [flags] NAME -- CMD [ARGS...]\n"},
		// Each subcommand has its own help, not the others'.
		{args: []string{"serve", "-h"}, code: exitOK, stdout: "Usage: coordhost serve [flags] FILE\n", not: "lock hold"},
		{args: []string{"validate", "-help"}, code: exitOK, stdout: "Usage: coordhost validate [flags] FILE\n", not: "-listen"},
		{args: []string{"lock", "hold", "-h"}, code: exitOK, stdout: "Usage: coordhost lock hold [flags] NAME -- CMD [ARGS...]\n", not: "-listen"},
		{args: []string{"lock", "hold", "job", "-help", "--", "true"}, code: exitOK, stdout: "Usage: coordhost lock hold "},
		{args: []string{"dev-redis", "--help"}, code: exitOK, stdout: "Usage: coordhost dev-redis [-socket PATH]\n", not: "-ttl"},
		{args: []string{"version", "-h"}, code: exitOK, stdout: "Usage: coordhost version\n"},
		{args: []string{"lock", "-h"}, code: exitOK, stdout: "Usage: coordhost lock SUBCOMMAND ...\n"},
		{args: []string{"lock", "help"}, code: exitOK, stdout: "coordhost lock hold [flags] NAME -- CMD [ARGS...]\n"},
		{args: []string{"help", "-h"}, code: exitOK, stdout: "Usage:\n  coordhost serve [flags] FILE\n"},
		{args: []string{"help", "serve"}, code: exitOK, stdout: "Usage: coordhost serve [flags] FILE\n"},
		{args: []string{"help", "lock", "hold"}, code: exitOK, stdout: "Usage: coordhost lock hold "},
		{args: []string{"help", "lock"}, code: exitOK, stdout: "Usage: coordhost lock SUBCOMMAND"},
		{args: []string{"help", "help"}, code: exitOK, stdout: "Usage:\n  coordhost serve [flags] FILE\n"},
		{args: []string{"help", "srve"}, code: exitUsage, stderr: `coordhost: help: unknown command "srve"; did you mean "serve"?`},
		{args: []string{"version"}, code: exitOK, stdout: "coordhost "},
		{args: []string{"--version"}, code: exitOK, stdout: "coordhost "},
		{args: []string{"version", "now"}, code: exitUsage, stderr: `version: unexpected argument "now"`},
		// Typos get a suggestion; other unknown words do not.
		{args: []string{"frobnicate"}, code: exitUsage, stderr: "coordhost: unknown command \"frobnicate\"\nRun 'coordhost help' for usage.\n"},
		{args: []string{"serv"}, code: exitUsage, stderr: `coordhost: unknown command "serv"; did you mean "serve"?`},
		{args: []string{"valdiate", "x.hcl"}, code: exitUsage, stderr: `unknown command "valdiate"; did you mean "validate"?`},
		{args: []string{"Serve"}, code: exitUsage, stderr: `did you mean "serve"?`},
		{args: []string{"dev-reds"}, code: exitUsage, stderr: `did you mean "dev-redis"?`},
		{args: []string{"hold", "job", "--", "true"}, code: exitUsage, stderr: `unknown command "hold"; did you mean "lock hold"?`},
		{args: []string{"lokc", "hold"}, code: exitUsage, stderr: `unknown command "lokc"; did you mean "lock"?`},
		{args: []string{"lock"}, code: exitUsage, stderr: "coordhost: lock: missing subcommand (hold)\nRun 'coordhost lock -h' for usage.\n"},
		{args: []string{"lock", "grab"}, code: exitUsage, stderr: "coordhost: lock: unknown subcommand \"grab\"\n"},
		{args: []string{"lock", "hodl", "job", "--", "true"}, code: exitUsage, stderr: `coordhost: lock: unknown subcommand "hodl"; did you mean "hold"?`},
		{args: []string{"dev-redis", "extra"}, code: exitUsage, stderr: "coordhost: dev-redis: unexpected argument \"extra\"\nRun 'coordhost dev-redis -h' for usage.\n"},
		{args: []string{"dev-redis", "-port", "1"}, code: exitUsage, stderr: "flag provided but not defined: -port"},
		{args: []string{"dev-redis", "-sockt", "/x"}, code: exitUsage, stderr: "flag provided but not defined: -sockt (did you mean -socket?)"},
		{args: []string{"lock", "hold", "job", "--", "/nonexistent/coordhost-test-cmd"}, code: exitCmdNotFound, stderr: "cannot run /nonexistent/coordhost-test-cmd"},
		{args: []string{"lock", "hold", "job", "--", "coordhost-test-no-such-command"}, code: exitCmdNotFound, stderr: "executable file not found"},
		{args: []string{"lock", "hold", "job", "--", "/etc/passwd"}, code: exitCannotRun, stderr: "cannot run /etc/passwd"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), tc.args, te.env)
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			if !strings.Contains(te.out.String(), tc.stdout) {
				t.Errorf("stdout = %q, want it to contain %q", te.out, tc.stdout)
			}
			if !strings.Contains(te.errOut.String(), tc.stderr) {
				t.Errorf("stderr = %q, want it to contain %q", te.errOut, tc.stderr)
			}
			if tc.not != "" && strings.Contains(te.out.String()+te.errOut.String(), tc.not) {
				t.Errorf("output contains %q:\n%s%s", tc.not, te.out, te.errOut)
			}
		})
	}
}

// TestCommandHelp: every command's -h is its own short help, made from the
// same flag definitions the parser uses, and says what matters.
func TestCommandHelp(t *testing.T) {
	mentions := map[string][]string{
		"serve":    {"SIGHUP", "dev mode", "Exit status: 0 after a clean shutdown"},
		"validate": {`"FILE: OK"`},
		"lock hold": {envRedisURL, "the file's credentials apply unless ADDR has its own", envLockName, envFencingToken, devredis.ServerEnv, defaultGrace.String(), "(default 15s)", `(default "coordhost:lock:")`, "126", "127",
			envToken, envTLSCert, envTLSKey, envTLSCA, "a broken connection loses it"},
		"limit check": {envToken, envTLSCert, envTLSKey, envTLSCA, "no window with -server"},
		"dev-redis":   {devredis.ServerEnv},
	}
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			te := newTestEnv(t, nil)
			if code := run(context.Background(), append(strings.Fields(c.name), "-h"), te.env); code != exitOK {
				t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
			}
			help := te.out.String()
			if help != c.help() {
				t.Fatalf("-h printed something else than the command's help:\n%s", help)
			}
			te2 := newTestEnv(t, nil)
			if code := run(context.Background(), append([]string{"help"}, strings.Fields(c.name)...), te2.env); code != exitOK || te2.out.String() != help {
				t.Fatalf("coordhost help %s: status %d, output:\n%s", c.name, code, te2.out)
			}
			if !strings.HasPrefix(help, "Usage: coordhost "+c.name) {
				t.Errorf("help does not start with its usage line:\n%s", help)
			}
			// lock hold's has grown to 61 lines with -server (its flags and
			// environment) and -redis's Sentinel URL.
			if n := strings.Count(help, "\n"); n > 64 {
				t.Errorf("help has %d lines; keep it short", n)
			}
			for _, line := range strings.Split(help, "\n") {
				if utf8.RuneCountInString(line) > helpWidth {
					t.Errorf("line longer than %d: %q", helpWidth, line)
				}
			}
			if c.flags != nil {
				c.flags().VisitAll(func(f *flag.Flag) {
					if !strings.Contains(help, "\n  -"+f.Name+" ") && !strings.Contains(help, "\n  -"+f.Name+"\n") {
						t.Errorf("help does not list -%s", f.Name)
					}
				})
			}
			flat := strings.Join(strings.Fields(help), " ")
			for _, w := range mentions[c.name] {
				if !strings.Contains(flat, w) {
					t.Errorf("help does not mention %q:\n%s", w, help)
				}
			}
		})
	}
}

// TestREADMEMatchesHelp keeps the README's CLI section in step with the
// commands and their flags.
func TestREADMEMatchesHelp(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## The CLI\n")
	if !ok {
		t.Fatal(`README.md has no "## The CLI" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, c := range commands() {
		if !strings.Contains(section, "coordhost "+c.name) {
			t.Errorf("README's CLI section does not show coordhost %s", c.name)
		}
		if c.flags == nil {
			continue
		}
		c.flags().VisitAll(func(f *flag.Flag) {
			arg, _ := flag.UnquoteUsage(f)
			form := "-" + f.Name
			if arg != "" {
				form += " " + arg
			}
			if !strings.Contains(section, form) {
				t.Errorf("README's CLI section does not document %s of %s", form, c.name)
			}
		})
	}
	for _, w := range []string{envRedisURL, devredis.ServerEnv, envLockName, envFencingToken, "-h"} {
		if !strings.Contains(section, w) {
			t.Errorf("README's CLI section does not mention %s", w)
		}
	}
}

func TestClosest(t *testing.T) {
	words := commandWords()
	cases := map[string]string{
		"serve": "serve", "serv": "serve", "server": "serve", "sevre": "serve", "SERVE": "serve",
		"validat": "validate", "vaildate": "validate", "val": "validate",
		"lok": "lock", "hold": "lock hold", "hodl": "lock hold", "dev-redsi": "dev-redis", "devredis": "dev-redis",
		"versoin": "version", "hlep": "help",
		"lockhold": "lock hold", "frobnicate": "", "x": "", "run": "", "": "",
	}
	for in, want := range cases {
		if got := closest(in, words); got != want {
			t.Errorf("closest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"hold", "hold", 0}, {"hodl", "hold", 1},
		{"serv", "serve", 1}, {"kitten", "sitting", 3}, {"ttl", "tll", 1}, {"ca", "abc", 3}, {"λx", "xλ", 1},
	} {
		if d := editDistance(tc.a, tc.b); d != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, d, tc.d)
		}
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"A=1", "COORDHOST_LOCK_NAME=outer", "COORDHOST_FENCING_TOKEN=99", "COORDHOST_REDIS_URL=redis://:secret@db:6379", "COORDHOST_TOKEN=t0k", "B=2"}
	got := childEnv(base, "inner", "")
	want := []string{"A=1", "B=2", "COORDHOST_LOCK_NAME=inner"}
	if !slices.Equal(got, want) {
		t.Fatalf("childEnv without fencing = %q, want %q", got, want)
	}
	got = childEnv(base, "inner", "7")
	want = []string{"A=1", "B=2", "COORDHOST_LOCK_NAME=inner", "COORDHOST_FENCING_TOKEN=7"}
	if !slices.Equal(got, want) {
		t.Fatalf("childEnv with fencing = %q, want %q", got, want)
	}
}

func TestParseRWLockHoldArgsBad(t *testing.T) {
	cfgArgs := []string{"-config", "c.hcl"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{name: "no arguments", args: nil, want: "missing rwlock NAME"},
		{name: "missing NAME before --", args: []string{"-config", "c.hcl", "--", "true"}, want: "missing rwlock NAME"},
		{name: "missing -- and CMD", args: append(cfgArgs, "cache"), want: `missing "--" and CMD`},
		{name: "missing CMD", args: append(cfgArgs, "cache", "--"), want: "missing CMD after --"},
		{name: "empty NAME", args: append(cfgArgs, "", "--", "true"), want: "rwlock NAME is empty"},
		{name: "no config", args: []string{"-read", "cache", "--", "true"}, want: "missing -config FILE: NAME is an rwlock block of it"},
		{name: "config empty", args: []string{"-config", "", "cache", "--", "true"}, want: "-config FILE is empty"},
		{name: "read and write", args: append(cfgArgs, "-read", "-write", "cache", "--", "true"), want: "-read and -write exclude each other"},
		{name: "read=false alone", args: append(cfgArgs, "-read=false", "cache", "--", "true"), want: "-read=false: give -write"},
		{name: "read with value", args: append(cfgArgs, "-read=maybe", "cache", "--", "true"), want: `-read "maybe": want true or false`},
		// The block decides these: lock hold's flags that do not exist here.
		{name: "ttl", args: append(cfgArgs, "-ttl", "5s", "cache", "--", "true"), want: "flag provided but not defined: -ttl"},
		{name: "prefix", args: append(cfgArgs, "-prefix", "p:", "cache", "--", "true"), want: "flag provided but not defined: -prefix"},
		{name: "fencing", args: append(cfgArgs, "-fencing", "cache", "--", "true"), want: "flag provided but not defined: -fencing"},
		{name: "misspelt flag", args: append(cfgArgs, "-raed", "cache", "--", "true"), want: "(did you mean -read?)"},
		{name: "wait negative", args: append(cfgArgs, "-wait", "-1s", "cache", "--", "true"), want: "-wait must not be negative"},
		{name: "attr without =", args: append(cfgArgs, "-attr", "tenant", "cache", "--", "true"), want: `-attr "tenant": want KEY=VALUE`},
		{name: "redis bad", args: append(cfgArgs, "-redis", "nohost", "cache", "--", "true"), want: "is not host:port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseHoldArgsFor(rwlockHold, tc.args, noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseHoldArgsFor(rwlock, %q) error = %v, want it to contain %q", tc.args, err, tc.want)
			}
			te := newTestEnv(t, nil)
			code := run(context.Background(), append([]string{"rwlock", "hold"}, tc.args...), te.env)
			if code != exitUsage {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitUsage, te.errOut)
			}
			want := "coordhost: rwlock hold: " + err.Error() + "\nRun 'coordhost rwlock hold -h' for usage.\n"
			if te.errOut.String() != want {
				t.Fatalf("stderr = %q, want %q", te.errOut, want)
			}
		})
	}
}

func TestParseRWLockHoldArgsGood(t *testing.T) {
	for _, tc := range []struct {
		args []string
		read bool
	}{
		{[]string{"-config", "c.hcl", "cache", "--", "true"}, false},
		{[]string{"-config", "c.hcl", "-write", "cache", "--", "true"}, false},
		{[]string{"cache", "-read", "-config", "c.hcl", "--", "true"}, true},
		{[]string{"-config", "c.hcl", "-read=true", "-write=false", "cache", "--", "true"}, true},
	} {
		got, err := parseHoldArgsFor(rwlockHold, tc.args, noEnv)
		if err != nil {
			t.Fatalf("parseHoldArgsFor(rwlock, %q): %v", tc.args, err)
		}
		if got.read != tc.read || got.name != "cache" || got.configPath != "c.hcl" || got.fencing {
			t.Fatalf("parseHoldArgsFor(rwlock, %q) = %+v", tc.args, got)
		}
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/host/devredis"
)

func TestParseHoldArgsBad(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string // substring of the error
	}{
		{"no arguments", nil, "missing lock NAME"},
		{"only flags", []string{"-ttl", "5s"}, "missing lock NAME"},
		{"missing NAME before --", []string{"--", "true"}, "missing lock NAME"},
		{"missing -- and CMD", []string{"job"}, `missing "--" and CMD`},
		{"missing --", []string{"job", "echo", "hi"}, `missing "--" between NAME and CMD (got "echo"`},
		{"missing CMD", []string{"job", "--"}, "missing CMD after --"},
		{"empty CMD", []string{"job", "--", ""}, "CMD is an empty string"},
		{"two names", []string{"a", "b", "--", "true"}, `unexpected argument "b" before --`},
		{"empty NAME", []string{"", "--", "true"}, "lock NAME is empty"},
		{"ttl zero", []string{"-ttl", "0s", "job", "--", "true"}, "-ttl must be at least 1ms, got 0s"},
		{"ttl negative", []string{"-ttl", "-1s", "job", "--", "true"}, "-ttl must be at least 1ms, got -1s"},
		{"ttl below 1ms", []string{"-ttl", "500us", "job", "--", "true"}, "-ttl must be at least 1ms"},
		{"ttl not a duration", []string{"-ttl", "soon", "job", "--", "true"}, `invalid value "soon" for flag -ttl`},
		{"ttl without unit", []string{"-ttl", "15", "job", "--", "true"}, `invalid value "15" for flag -ttl`},
		{"wait negative", []string{"-wait", "-1s", "job", "--", "true"}, "-wait must not be negative"},
		{"wait not a duration", []string{"-wait", "x", "job", "--", "true"}, `invalid value "x" for flag -wait`},
		{"unknown flag", []string{"-bogus", "job", "--", "true"}, "flag provided but not defined: -bogus"},
		{"unknown flag after NAME", []string{"job", "-bogus", "--", "true"}, "flag provided but not defined: -bogus"},
		{"flag missing value", []string{"job", "-ttl"}, "flag needs an argument: -ttl"},
		{"empty prefix", []string{"-prefix", "", "job", "--", "true"}, "-prefix must not be empty"},
		{"fencing with value", []string{"-fencing=maybe", "job", "--", "true"}, `invalid boolean value "maybe" for -fencing`},
		{"redis not host:port", []string{"-redis", "localhost", "job", "--", "true"}, "is not host:port"},
		{"redis bad port", []string{"-redis", "localhost:http", "job", "--", "true"}, `bad port "http"`},
		{"redis port out of range", []string{"-redis", "localhost:70000", "job", "--", "true"}, `bad port "70000"`},
		{"redis missing host", []string{"-redis", ":6379", "job", "--", "true"}, "missing host"},
		{"redis relative unix", []string{"-redis", "unix://redis.sock", "job", "--", "true"}, "needs an absolute path"},
		{"redis bad scheme", []string{"-redis", "http://x:1", "job", "--", "true"}, "invalid URL scheme"},
		{"redis socket path too long", []string{"-redis", "/" + strings.Repeat("x", 120), "job", "--", "true"}, "too long"},
		{"config empty", []string{"-config", "", "job", "--", "true"}, "-config FILE is empty"},
		{"config missing value", []string{"job", "-config"}, "flag needs an argument: -config"},
		{"ttl with config", []string{"-config", "c.hcl", "-ttl", "5s", "job", "--", "true"}, `-ttl cannot be used with -config: lock "job" of the file sets it`},
		{"fencing with config", []string{"-config", "c.hcl", "job", "-fencing", "--", "true"}, "-fencing cannot be used with -config"},
		{"fencing=false with config", []string{"-config", "c.hcl", "-fencing=false", "job", "--", "true"}, "-fencing cannot be used with -config"},
		{"prefix with config", []string{"-config", "c.hcl", "-prefix", "p:", "job", "--", "true"}, "-prefix cannot be used with -config"},
		{"var without config", []string{"-var", "a=b", "job", "--", "true"}, "-var needs -config FILE"},
		{"attr without config", []string{"-attr", "tenant=acme", "job", "--", "true"}, "-attr needs -config FILE"},
		{"var without =", []string{"-config", "c.hcl", "-var", "ttl", "job", "--", "true"}, `-var "ttl": want NAME=VALUE`},
		{"var bad name", []string{"-config", "c.hcl", "-var", "1x=2", "job", "--", "true"}, `"1x" is not a valid variable name`},
		{"attr without =", []string{"-config", "c.hcl", "-attr", "tenant", "job", "--", "true"}, `-attr "tenant": want KEY=VALUE`},
		{"attr empty key", []string{"-config", "c.hcl", "-attr", "=acme", "job", "--", "true"}, `-attr "=acme": empty KEY`},
		{"redis bad with config", []string{"-config", "c.hcl", "-redis", "nohost", "job", "--", "true"}, "is not host:port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseHoldArgs(tc.args)
			if err == nil {
				t.Fatalf("parseHoldArgs(%q) = nil error, want %q", tc.args, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseHoldArgs(%q) error = %q, want it to contain %q", tc.args, err, tc.want)
			}

			// The same through the command: exit 2, message on stderr,
			// nothing started (no redis-server needed for any of these).
			te := newTestEnv(t, nil)
			code := run(context.Background(), append([]string{"lock", "hold"}, tc.args...), te.env)
			if code != exitUsage {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitUsage, te.errOut)
			}
			if want := "coordhost: lock hold: " + err.Error() + "\n"; !strings.HasPrefix(te.errOut.String(), want) {
				t.Fatalf("stderr = %q, want it to start with %q", te.errOut, want)
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
			holdConfig{redis: "127.0.0.1:6379", redisDesc: "127.0.0.1:6379", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"ipv6 address", []string{"-redis", "[::1]:6379", "job", "--", "true"},
			holdConfig{redis: "[::1]:6379", redisDesc: "[::1]:6379", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"socket path", []string{"-redis", "/run/redis/redis.sock", "job", "--", "true"},
			holdConfig{redis: "/run/redis/redis.sock", redisDesc: "unix socket /run/redis/redis.sock", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"unix URL", []string{"-redis", "unix:///run/redis/redis.sock", "job", "--", "true"},
			holdConfig{redis: "unix:///run/redis/redis.sock", redisDesc: "unix socket /run/redis/redis.sock", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
		{"redis URL", []string{"-redis", "redis://:secret@db.example:6380/2", "job", "--", "true"},
			holdConfig{redis: "redis://:secret@db.example:6380/2", redisDesc: "db.example:6380", ttl: defaultTTL, prefix: defaultPrefix, name: "job", argv: []string{"true"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHoldArgs(tc.args)
			if err != nil {
				t.Fatalf("parseHoldArgs(%q): %v", tc.args, err)
			}
			if got.redis != tc.want.redis || got.redisDesc != tc.want.redisDesc || got.ttl != tc.want.ttl ||
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
	if _, err := parseHoldArgs([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: err = %v, want flag.ErrHelp", err)
	}
}

func TestTopLevel(t *testing.T) {
	cases := []struct {
		args       []string
		code       int
		stdout     string
		stderr     string
		noStderrOK bool
	}{
		{args: nil, code: exitUsage, stderr: "Usage:"},
		{args: []string{"help"}, code: exitOK, stdout: "Usage:\n  coordhost serve -config FILE"},
		{args: []string{"serve", "-h"}, code: exitOK, stdout: "Flags for serve"},
		{args: []string{"validate", "-help"}, code: exitOK, stdout: "Usage:"},
		{args: []string{"-h"}, code: exitOK, stdout: "Usage:"},
		{args: []string{"--help"}, code: exitOK, stdout: "Usage:"},
		{args: []string{"lock", "hold", "-h"}, code: exitOK, stdout: "Flags for lock hold"},
		{args: []string{"lock", "hold", "job", "-help", "--", "true"}, code: exitOK, stdout: "Flags for lock hold"},
		{args: []string{"version"}, code: exitOK, stdout: "coordhost "},
		{args: []string{"frobnicate"}, code: exitUsage, stderr: `coordhost: unknown command "frobnicate"`},
		{args: []string{"lock"}, code: exitUsage, stderr: "lock: missing subcommand (hold)"},
		{args: []string{"lock", "grab"}, code: exitUsage, stderr: `lock: unknown subcommand "grab"`},
		{args: []string{"dev-redis", "extra"}, code: exitUsage, stderr: `dev-redis: unexpected argument "extra"`},
		{args: []string{"dev-redis", "-port", "1"}, code: exitUsage, stderr: "flag provided but not defined: -port"},
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
		})
	}
}

// TestUsageMentionsEveryFlag keeps the hand-written usage text in step with
// the flags parseHoldArgs defines.
func TestUsageMentionsEveryFlag(t *testing.T) {
	for _, f := range []string{"-redis ADDR", "-ttl DURATION", "-prefix STRING", "-fencing", "-wait DURATION",
		"-config FILE", "-var NAME=VALUE", "-attr KEY=VALUE", "-listen ADDR",
		"(default 15s)", `(default "coordhost:lock:")`, envLockName, envFencingToken, devredis.ServerEnv} {
		if !strings.Contains(usageText, f) {
			t.Errorf("usage text does not mention %q", f)
		}
	}
	for _, name := range []string{"redis", "ttl", "prefix", "fencing", "wait", "config", "var", "attr"} {
		if _, err := parseHoldArgs([]string{"-" + name + "=1", "job", "--", "true"}); err != nil && strings.Contains(err.Error(), "not defined") {
			t.Errorf("flag -%s of lock hold is in the usage but not defined", name)
		}
	}
	for _, name := range []string{"config", "var", "listen"} {
		if _, err := parseServeArgs([]string{"-" + name + "=1"}); err != nil && strings.Contains(err.Error(), "not defined") {
			t.Errorf("flag -%s of serve is in the usage but not defined", name)
		}
	}
	for _, name := range []string{"config", "var"} {
		if _, err := parseValidateArgs([]string{"-" + name + "=1"}); err != nil && strings.Contains(err.Error(), "not defined") {
			t.Errorf("flag -%s of validate is in the usage but not defined", name)
		}
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"A=1", "COORDHOST_LOCK_NAME=outer", "COORDHOST_FENCING_TOKEN=99", "B=2"}
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

package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// Bad command lines of lock hold -server and limit check -server: exit 2
// with one message naming the mistake, before anything is dialled (the
// server address is never reachable here).
func TestServerArgsBad(t *testing.T) {
	const url = "http://127.0.0.1:1"
	hold := func(args ...string) []string {
		return append(append([]string{"lock", "hold"}, args...), "job", "--", "true")
	}
	check := func(args ...string) []string {
		return append(append([]string{"limit", "check"}, args...), "checkout")
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
		not  string // must not be on stderr
	}{
		{name: "-server and -config", args: hold("-server", url, "-config", "c.hcl"), want: "-server and -config exclude each other"},
		{name: "-server and -redis", args: hold("-redis", "/tmp/r.sock", "-server", url), want: "-server and -redis exclude each other"},
		{name: "-ttl with -server", args: hold("-server", url, "-ttl", "5s"), want: `-ttl cannot be used with -server: lock "job" of the daemon's configuration sets it`},
		{name: "-fencing with -server", args: hold("-server", url, "-fencing"), want: "-fencing cannot be used with -server"},
		{name: "-prefix with -server", args: hold("-server", url, "-prefix", "p:"), want: "-prefix cannot be used with -server"},
		{name: "-var with -server", args: hold("-server", url, "-var", "a=b"), want: "-var cannot be used with -server"},
		{name: "-session without -server", args: hold("-session", "abc"), want: "-session needs -server URL"},
		{name: "-session empty", args: hold("-server", url, "-session", ""), want: "-session ID is empty"},
		{name: "-wait negative", args: hold("-server", url, "-wait", "-1s"), want: "-wait must not be negative"},
		{name: "-attr without =", args: hold("-server", url, "-attr", "tenant"), want: `-attr "tenant": want KEY=VALUE`},
		{name: "-attr without -config or -server", args: hold("-attr", "a=b"), want: "-attr needs -config FILE or -server URL"},
		{name: "-server empty", args: hold("-server", ""), want: "-server URL is empty"},
		{name: "-server without scheme", args: hold("-server", "localhost:7379"), want: `-server "localhost:7379": want http://HOST:PORT (cleartext HTTP/2) or https://HOST:PORT (TLS)`},
		{name: "-server other scheme", args: hold("-server", "grpc://h:1"), want: `-server "grpc://h:1": want http://`},
		{name: "-server with a password", args: hold("-server", "http://u:hunter2@h:1"), want: `-server "http://xxxxx@h:1": credentials do not go in the URL; put a token in $COORDHOST_TOKEN`, not: "hunter2"},
		{name: "-server without host", args: hold("-server", "http://:1"), want: "missing host"},
		{name: "-server bad port", args: hold("-server", "http://h:99999"), want: `bad port "99999"`},
		{name: "-server with a query", args: hold("-server", "http://h:1/?a=b"), want: "a query or fragment has no meaning here"},
		{name: "-server steering the terminal", args: hold("-server", "\x1b[2J"), want: `-server "\x1b[2J": want http://`},
		{name: "TLS file for cleartext", args: hold("-server", url), env: map[string]string{envTLSCA: "/ca.pem"},
			want: "$COORDHOST_TLS_CA is set, but -server \"" + url + "\" is cleartext: give an https:// URL (or unset $COORDHOST_TLS_CA)"},
		{name: "client certificate without key", args: hold("-server", "https://h:1"), env: map[string]string{envTLSCert: "/c.pem"},
			want: "$COORDHOST_TLS_CERT and $COORDHOST_TLS_KEY go together"},
		{name: "token with a newline", args: hold("-server", url), env: map[string]string{envToken: "s3cret\n"},
			want: "$COORDHOST_TOKEN holds a space, a control character or a non-ASCII character (7 bytes)", not: "s3cret"},
		{name: "rwlock hold has no -server", args: []string{"rwlock", "hold", "-server", url, "job", "--", "true"}, want: "flag provided but not defined: -server"},

		{name: "check: -server and -config", args: check("-server", url, "-config", "c.hcl"), want: "-server and -config exclude each other"},
		{name: "check: -server and -redis", args: check("-server", url, "-redis", "/tmp/r.sock"), want: "-server and -redis exclude each other"},
		{name: "check: -var with -server", args: check("-server", url, "-var", "a=b"), want: "-var cannot be used with -server"},
		{name: "check: -n 0 with -server", args: check("-server", url, "-n", "0"), want: "-n 0 cannot be used with -server"},
		{name: "check: -n negative", args: check("-server", url, "-n", "-2"), want: "-n must not be negative, got -2"},
		{name: "check: -attr with an empty KEY", args: check("-server", url, "-attr", "=x"), want: `-attr "=x": empty KEY`},
		{name: "check: -server not a URL", args: check("-server", "h:1"), want: `-server "h:1": want http://`},
		{name: "check: neither -config nor -server", args: check(), want: "missing -config FILE or -server URL"},
		{name: "check: -wait does not exist", args: check("-server", url, "-wait", "1s"), want: "flag provided but not defined: -wait"},
		{name: "check: two NAMEs", args: append(check("-server", url), "global"), want: `unexpected argument "global"`},
		{name: "check: TLS key without certificate", args: check("-server", "https://h:1"), env: map[string]string{envTLSKey: "/k.pem"},
			want: "$COORDHOST_TLS_CERT and $COORDHOST_TLS_KEY go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, tc.env)
			code := run(context.Background(), tc.args, te.env)
			if code != exitUsage {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitUsage, te.errOut)
			}
			cmd := tc.args[0] + " " + tc.args[1]
			got := te.errOut.String()
			if !strings.HasPrefix(got, "coordhost: "+cmd+": ") || !strings.HasSuffix(got, "\nRun 'coordhost "+cmd+" -h' for usage.\n") || strings.Count(got, "\n") != 2 {
				t.Fatalf("stderr is not one message and the usage hint:\n%s", got)
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, got)
			}
			if tc.not != "" && strings.Contains(got, tc.not) {
				t.Fatalf("stderr shows %q:\n%s", tc.not, got)
			}
			if strings.ContainsAny(got, "\x1b\r") || te.out.String() != "" {
				t.Fatalf("stdout %q; stderr %q", te.out, got)
			}
		})
	}
}

func TestParseServerArgsGood(t *testing.T) {
	cfg, err := parseHoldArgs([]string{"job", "-server", "https://coord.example:7379/", "-attr", "tenant=acme", "-wait", "2s", "-session", "s1", "--", "true"},
		envOf(map[string]string{envToken: "t0k", envTLSCA: "/ca.pem", envRedisURL: "not an address"}))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.server
	if s == nil || s.url != "https://coord.example:7379" || !s.tls || s.token != "t0k" || s.caFile != "/ca.pem" ||
		cfg.attrs["tenant"] != "acme" || cfg.session != "s1" || cfg.wait != 2e9 || cfg.redis != "" {
		t.Fatalf("%+v %+v", cfg, s)
	}
	a, err := parseLimitCheckArgs([]string{"-server", "http://127.0.0.1:7379/base", "checkout", "-n", "3"}, noEnv)
	if err != nil || a.server == nil || a.server.url != "http://127.0.0.1:7379/base" || a.server.tls || a.n != 3 || a.name != "checkout" {
		t.Fatalf("%+v %v", a, err)
	}
}

// A cleartext call that a TLS listener refuses hints at https://.
func TestAPIErrorTextHintsTLS(t *testing.T) {
	err := connect.NewError(connect.CodeUnavailable, errors.New(`Post "http://127.0.0.1:7579/coordhost.v1.LockService/Hold": write tcp 127.0.0.1:1->127.0.0.1:7579: write: broken pipe`))
	if got := apiErrorText("http://127.0.0.1:7579", err); !strings.Contains(got, "use https://") {
		t.Errorf("no TLS hint: %s", got)
	}
	if got := apiErrorText("https://127.0.0.1:7579", err); strings.Contains(got, "use https://") {
		t.Errorf("a TLS hint for an https URL: %s", got)
	}
}

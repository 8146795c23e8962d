package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/host/devredis"
)

func TestParseHoldArgsConfig(t *testing.T) {
	got, err := parseHoldArgs([]string{"-config", "c.hcl", "-var", "a=1", "-var=a=2", "-var", "b=[\"x\"]", "-attr", "tenant=acme", "job",
		"-attr", "q=y=z", "-attr", "tenant=other", "-wait", "1s", "-redis", "/tmp/r.sock", "--", "true"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got.configPath != "c.hcl" || got.name != "job" || got.wait != time.Second || got.redisDesc != "unix socket /tmp/r.sock" {
		t.Fatalf("%+v", got)
	}
	if len(got.load.Vars) != 2 || got.load.Vars["a"].AsString() != "2" || got.load.Vars["b"].AsString() != `["x"]` {
		t.Fatalf("vars = %#v", got.load.Vars)
	}
	if len(got.attrs) != 2 || got.attrs["tenant"] != "other" || got.attrs["q"] != "y=z" {
		t.Fatalf("attrs = %v", got.attrs)
	}
}

// TestHoldConfig runs lock hold -config end to end on a test server: the
// lock block's ttl, fencing and prefix, a builtin retry policy between two
// contending holders, and a builtin partition policy fed by -attr.
func TestHoldConfig(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	path := writeConfig(t, redisBlock(d.Socket())+goodConfig)
	ctx := context.Background()

	t.Run("lock block", func(t *testing.T) {
		te := newTestEnv(t, nil)
		code := run(ctx, []string{"lock", "hold", "-config", path, "job", "--", "sh", "-c", `echo "$COORDHOST_LOCK_NAME $COORDHOST_FENCING_TOKEN"; exit 3`}, te.env)
		if code != 3 {
			t.Fatalf("exit status %d, want 3; stderr:\n%s", code, te.errOut)
		}
		if te.out.String() != "job 1\n" {
			t.Errorf("stdout = %q", te.out)
		}
		for _, s := range []string{`coordhost: acquired lock "job" (fencing token 1); key "t:job", ttl 5s` + "\n", `coordhost: released lock "job"` + "\n"} {
			if !strings.Contains(te.errOut.String(), s) {
				t.Errorf("stderr lacks %q:\n%s", s, te.errOut)
			}
		}
		if strings.Contains(te.errOut.String(), "dev mode") || strings.Contains(te.errOut.String(), "level=") {
			t.Errorf("unexpected log lines:\n%s", te.errOut)
		}
	})

	t.Run("variable", func(t *testing.T) {
		te := newTestEnv(t, nil)
		code := run(ctx, []string{"lock", "hold", "-config", path, "-var", "ttl=700ms", "job", "--", "true"}, te.env)
		if code != 0 || !strings.Contains(te.errOut.String(), `coordhost: acquired lock "job" (fencing token 2); key "t:job", ttl 700ms`+"\n") {
			t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
		}
	})

	t.Run("partition", func(t *testing.T) {
		te := newTestEnv(t, nil)
		code := run(ctx, []string{"lock", "hold", "-config", path, "-attr", "tenant=acme", "tenant", "--", "true"}, te.env)
		if code != 0 || !strings.Contains(te.errOut.String(), `coordhost: acquired lock "tenant"; key "t:tenant/acme", ttl 5s`+"\n") {
			t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
		}
	})

	t.Run("partition fails closed", func(t *testing.T) {
		ran := filepath.Join(t.TempDir(), "ran")
		te := newTestEnv(t, nil)
		code := run(ctx, []string{"lock", "hold", "-config", path, "tenant", "--", "touch", ran}, te.env)
		if code != exitFailure || !strings.Contains(te.errOut.String(), `needs a non-empty attribute "tenant"`) {
			t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatal("CMD ran")
		}
	})

	t.Run("retry policy gives up", func(t *testing.T) {
		p := writeConfig(t, redisBlock(d.Socket())+"policy \"retry\" \"never\" {\n  driver = \"builtin\"\n  kind   = \"none\"\n}\n\n"+
			"lock \"busy\" {\n  ttl   = \"5s\"\n  retry = policy.retry.never\n}\n")
		if err := c.Do(ctx, c.B().Set().Key("coordhost:lock:busy").Value("other").Px(30*time.Second).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		defer c.Do(ctx, c.B().Del().Key("coordhost:lock:busy").Build())
		ran := filepath.Join(t.TempDir(), "ran")
		te := newTestEnv(t, nil)
		code := run(ctx, []string{"lock", "hold", "-config", p, "busy", "--", "touch", ran}, te.env)
		if code != exitFailure || !strings.Contains(te.errOut.String(), `coordhost: lock "busy" not acquired: `) {
			t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatal("CMD ran")
		}
	})

	t.Run("contention", func(t *testing.T) {
		logFile := filepath.Join(t.TempDir(), "log")
		const workers = 3
		var wg sync.WaitGroup
		codes := make([]int, workers)
		envs := make([]*testEnv, workers)
		for i := range workers {
			envs[i] = newTestEnv(t, nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i] = run(ctx, []string{"lock", "hold", "-config", path, "-wait", "10s", "job", "--",
					"sh", "-c", fmt.Sprintf(`echo "enter %d $COORDHOST_FENCING_TOKEN" >> %s; sleep 0.1; echo "leave %d" >> %s`, i, logFile, i, logFile)}, envs[i].env)
			}()
		}
		wg.Wait()
		for i, code := range codes {
			if code != 0 {
				t.Fatalf("worker %d exit %d; stderr:\n%s", i, code, envs[i].errOut)
			}
		}
		b, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2*workers {
			t.Fatalf("log:\n%s", b)
		}
		last := 0
		for i := 0; i < len(lines); i += 2 {
			enter, leave := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			if len(enter) != 3 || enter[0] != "enter" || len(leave) != 2 || enter[1] != leave[1] {
				t.Fatalf("sections overlap:\n%s", b)
			}
			tok, _ := strconv.Atoi(enter[2])
			if tok <= last {
				t.Fatalf("fencing tokens do not grow:\n%s", b)
			}
			last = tok
		}
	})

	for _, k := range []string{"t:job", "t:tenant/acme"} {
		if keyExists(t, c, k) {
			t.Errorf("key %s still exists", k)
		}
	}
}

// TestHoldConfigRedisOverride: -redis replaces the file's redis block (so
// no dev mode for a file without one); redis.key_prefix still applies.
func TestHoldConfigRedisOverride(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	for _, tc := range []struct{ name, body, key string }{
		{"no redis block", goodConfig, "t:job"},
		{"other addresses", "redis {\n  addresses  = [\"127.0.0.1:1\"]\n  key_prefix = \"app:\"\n}\n" + goodConfig, "app:t:job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.body)
			te := newTestEnv(t, nil)
			code := run(context.Background(), []string{"lock", "hold", "-config", path, "-redis", d.Socket(), "job", "--", "true"}, te.env)
			if code != 0 || !strings.Contains(te.errOut.String(), "; key "+strconv.Quote(tc.key)+", ttl 5s\n") || strings.Contains(te.errOut.String(), "dev mode") {
				t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
			}
		})
	}
}

// TestHoldConfigDevMode: a file without a redis block and no -redis
// starts a private redis-server, says so, and removes it at exit.
func TestHoldConfigDevMode(t *testing.T) {
	t.Setenv(devredis.ServerEnv, redisServerBin(t)) // the host reads the real environment
	tmp := privateTMPDIR(t)
	path := writeConfig(t, goodConfig)
	te := newTestEnv(t, nil)
	code := run(context.Background(), []string{"lock", "hold", "-config", path, "job", "--", "sh", "-c", "exit 4"}, te.env)
	if code != 4 {
		t.Fatalf("exit status %d, want 4; stderr:\n%s", code, te.errOut)
	}
	m := regexp.MustCompile(`coordhost: level=WARN msg="dev mode: [^"]*" socket=\S+ pid=(\d+)\n`).FindStringSubmatch(te.errOut.String())
	if m == nil {
		t.Fatalf("no dev mode message; stderr:\n%s", te.errOut)
	}
	pid, _ := strconv.Atoi(m[1])
	if !processGone(pid) {
		t.Fatalf("redis-server %d still running", pid)
	}
	if left := tempDirEntries(t, tmp); len(left) != 0 {
		t.Fatalf("left behind: %q", left)
	}
}

// TestHoldConfigBadInput: mistakes in or about the file give a clear error,
// do not run CMD and write nothing to Redis.
func TestHoldConfigBadInput(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	good := writeConfig(t, redisBlock(d.Socket())+goodConfig)
	empty := writeConfig(t, redisBlock(d.Socket()))
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"broken file", []string{"-config", brokenExample, "invoice"}, exitFailure,
			[]string{"on ../../examples/broken.hcl line 5, in server:", "coordhost: lock hold: ../../examples/broken.hcl: 5 errors\n"}},
		{"no such file", []string{"-config", filepath.Join(t.TempDir(), "none.hcl"), "job"}, exitFailure,
			[]string{"Cannot read configuration file"}},
		{"undeclared variable", []string{"-config", good, "-var", "nope=1", "job"}, exitFailure, []string{"nope"}},
		{"no such lock", []string{"-config", good, "jbo"}, exitUsage,
			[]string{`coordhost: lock hold: ` + good + ` has no lock "jbo" (it declares "job", "tenant")`}},
		{"no locks at all", []string{"-config", empty, "job"}, exitUsage, []string{`has no lock "job" (it declares no locks)`}},
		{"attr without partition", []string{"-config", good, "-attr", "tenant=acme", "job"}, exitUsage,
			[]string{`coordhost: lock hold: -attr given, but lock "job" has no partition policy to use it`}},
		{"redis unreachable", []string{"-config", good, "-redis", "127.0.0.1:1", "job"}, exitFailure,
			[]string{"coordhost: connecting to Redis at 127.0.0.1:1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ran := filepath.Join(t.TempDir(), "ran")
			te := newTestEnv(t, nil)
			code := run(context.Background(), append(append([]string{"lock", "hold"}, tc.args...), "--", "touch", ran), te.env)
			if code != tc.code {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, tc.code, te.errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(te.errOut.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, te.errOut)
				}
			}
			if _, err := os.Stat(ran); err == nil {
				t.Error("CMD ran")
			}
		})
	}
	n, err := c.Do(context.Background(), c.B().Dbsize().Build()).AsInt64()
	if err != nil || n != 0 {
		t.Fatalf("DBSIZE = %d, %v; want 0", n, err)
	}
}

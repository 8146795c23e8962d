// Package scripts_test checks the project's shell scripts end to end.
package scripts_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoFindsInstalledRedis runs `make run`'s demo the way a fresh machine
// would: with a PATH that holds no redis-server at all, so the only way to
// one is what the project's own install step (scripts/redis-servers.sh,
// run by `make redis`) wrote to .cache/redis-env.sh. The demo runs in a copy
// of the repository's layout, so it never touches the checkout's bin/.
func TestDemoFindsInstalledRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and runs the whole demo")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(repo, ".cache", "redis-env.sh")
	if _, err := os.Stat(envFile); err != nil {
		// Under CI=true as everywhere: a missing server is a failure.
		t.Fatalf("%s is missing: run `make redis` (make test does): %v", envFile, err)
	}

	root := t.TempDir()
	for _, f := range []string{
		"scripts/demo.sh",
		"examples/coordhost.hcl",
		"plugins/examples/wasm/gobackoff/gobackoff.wasm",
		"plugins/examples/wasm/gostarve/gostarve.wasm",
		".cache/redis-env.sh",
	} {
		copyFile(t, filepath.Join(repo, f), filepath.Join(root, f))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for out, pkg := range map[string]string{
		"bin/coordhost":                "./cmd/coordhost",
		"bin/coordhost-example-plugin": "./plugins/examples/plugin",
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(root, out), pkg)
		cmd.Dir = repo
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}

	path := pathWithout(t, "redis-")
	if p, err := lookPathIn("redis-server", path); err == nil {
		t.Fatalf("the test PATH still finds %s", p)
	}
	demo := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts/demo.sh"), filepath.Join(root, "bin/coordhost"))
	demo.Env = append(environWithout("PATH", "COORDHOST_REDIS_SERVER"), "PATH="+path, "TMPDIR="+t.TempDir())
	var out bytes.Buffer
	demo.Stdout, demo.Stderr = &out, &out
	err = demo.Run()
	if err != nil || !strings.Contains(out.String(), "demo: OK\n") {
		t.Fatalf("demo with no redis-server on PATH: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "started private redis-server") {
		t.Fatalf("the demo did not say which server it started:\n%s", out.String())
	}
}

// pathWithout returns a PATH of one fresh directory holding a symlink to
// every command the current PATH finds, except those whose name starts
// with prefix.
func pathWithout(t *testing.T, prefix string) string {
	dir := t.TempDir()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, prefix) {
				continue
			}
			target := filepath.Join(d, name)
			if fi, err := os.Stat(target); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				continue
			}
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				continue // an earlier PATH entry wins, as in a shell
			}
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func lookPathIn(name, path string) (string, error) {
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}

func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

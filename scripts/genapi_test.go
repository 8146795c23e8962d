package scripts_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedAPIUpToDate regenerates the coordhost.v1 code (make proto's
// scripts/gen-api.sh, which also checks buf format and buf lint) into a
// temporary directory and fails when gen/ differs from it: a .proto edited
// without `make proto`, generated code edited by hand, or generators whose
// pins changed. The first run on a machine builds buf (a few minutes; its
// modules come from the Go module proxy), later runs take seconds. It runs
// under CI=true whatever the flags; -short skips it elsewhere.
func TestGeneratedAPIUpToDate(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: the generator is built on first use")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join(root, "scripts", "gen-api.sh"), out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/gen-api.sh: %v\n%s", err, b)
	}
	want := readTree(t, filepath.Join(out, "gen"))
	got := readTree(t, filepath.Join(root, "gen"))
	if len(want) == 0 {
		t.Fatal("the generator wrote nothing")
	}
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("gen/%s is missing: run make proto and commit it", name)
		case !bytes.Equal(g, w):
			t.Errorf("gen/%s differs from what proto/ generates: run make proto and commit it", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("gen/%s is not generated from proto/: remove it (make proto does)", name)
		}
	}
}

// readTree returns the regular files under dir by slash-separated relative
// path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := make(map[string][]byte)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

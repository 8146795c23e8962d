//go:build linux

package proctree

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone reports whether pid no longer runs: it does not exist, or it is a
// zombie (dead, waiting for a parent to reap it).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	s, ok := readStat(pid)
	return !ok || s.dead
}

func waitGone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still runs", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// reap collects the exit status of pid if it is our child (an adopted
// orphan or a process we started), so no zombie outlives the test.
func reap(pids ...int) {
	for _, pid := range pids {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}

func TestTreeFindsAndKillsDetachedDescendants(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Fatalf("BecomeSubreaper: %v", err)
	}
	// A child in a process group of its own (setpgid).
	grouped := exec.Command("sleep", "300")
	grouped.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := grouped.Start(); err != nil {
		t.Fatal(err)
	}
	defer grouped.Wait()
	// A double fork: the shell exits, its setsid child and that child's
	// background sleep are orphans, which this (subreaper) process adopts.
	dir := t.TempDir()
	pidFile := dir + "/pids"
	sh := exec.Command("sh", "-c",
		`setsid sh -c 'sleep 300 & echo $! > "$1.b"; echo $$ > "$1.a"; exec sleep 300' - "$0" </dev/null >/dev/null 2>&1 &`, pidFile)
	if err := sh.Run(); err != nil {
		t.Fatal(err)
	}
	readPid := func(path string) int {
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, err := os.ReadFile(path)
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
				return pid
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pid in %s", path)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	leader, background := readPid(pidFile+".a"), readPid(pidFile+".b")
	all := []int{grouped.Process.Pid, leader, background}
	defer reap(leader, background)

	tree := New(os.Getpid())
	tree.Refresh()
	members := tree.Members()
	for _, pid := range all {
		if !slices.Contains(members, pid) {
			t.Errorf("process %d is not a member (members %v)", pid, members)
		}
		if s, ok := readStat(pid); ok && s.ppid != os.Getpid() && pid != background {
			t.Errorf("process %d has parent %d", pid, s.ppid)
		}
	}
	if n := tree.Kill(); n < len(all) {
		t.Errorf("Kill killed %d processes, want at least %d", n, len(all))
	}
	waitGone(t, all...)
	if len(tree.Members()) != 0 {
		t.Errorf("members after Kill: %v", tree.Members())
	}
}

func TestTreeKeepsMembersWhoseParentExited(t *testing.T) {
	// The root is a shell (not a subreaper) whose child starts a sleep in
	// the background; once seen, the sleep stays a member after its parent
	// is killed and it is reparented away from the root.
	dir := t.TempDir()
	root := exec.Command("sh", "-c", `sh -c 'sleep 300 & echo $! > "$1"; exec sleep 300' - "$0"; sleep 300`, dir+"/pid")
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { root.Process.Kill(); root.Wait() }()
	var bg int
	deadline := time.Now().Add(10 * time.Second)
	for bg == 0 {
		b, _ := os.ReadFile(dir + "/pid")
		bg, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if time.Now().After(deadline) {
			t.Fatal("no pid")
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer reap(bg)
	tree := New(root.Process.Pid)
	tree.Refresh()
	s, _ := readStat(bg)
	parent := s.ppid
	if !slices.Contains(tree.Members(), bg) || !slices.Contains(tree.Members(), parent) {
		t.Fatalf("members %v lack %d or its parent %d", tree.Members(), bg, parent)
	}
	if err := syscall.Kill(parent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, parent)
	tree.Refresh()
	if !slices.Contains(tree.Members(), bg) {
		t.Fatalf("the orphan %d left the tree: %v", bg, tree.Members())
	}
	tree.Kill()
	waitGone(t, bg)
}

func TestReadStat(t *testing.T) {
	s, ok := readStat(os.Getpid())
	if !ok || s.ppid != os.Getppid() || s.start == 0 || s.dead {
		t.Fatalf("readStat(self) = %+v, %v", s, ok)
	}
	if _, ok := readStat(1 << 30); ok {
		t.Error("readStat of a missing pid succeeded")
	}
}

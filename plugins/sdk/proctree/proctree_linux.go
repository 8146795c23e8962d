//go:build linux

package proctree

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// BecomeSubreaper makes the calling process a child subreaper
// (PR_SET_CHILD_SUBREAPER): a descendant whose parent exits is reparented
// to it rather than to init, so every process it started, however
// detached, stays in its subtree while it lives. Adopted orphans that exit
// stay zombies until it reaps them or exits itself.
func BecomeSubreaper() error {
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// Supported reports whether this platform can track descendants.
func Supported() bool { return true }

// stat is what the tree reads of one process.
type stat struct {
	ppid  int
	start uint64
	dead  bool // zombie or dead: nothing to stop or kill
}

// readStat parses /proc/<pid>/stat.
func readStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 { // f[0] is field 3 (state); start time is field 22
		return stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return stat{}, false
	}
	st := f[0][0]
	return stat{ppid: ppid, start: start, dead: st == 'Z' || st == 'X' || st == 'x'}, true
}

// snapshot reads every process's stat.
func snapshot() map[int]stat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make(map[int]stat, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		if s, ok := readStat(pid); ok {
			out[pid] = s
		}
	}
	return out
}

// refreshLocked updates the members from a snapshot: live processes below
// the root or below a member join; members that are gone, dead or whose
// pid now names another process leave. It returns the members that
// joined.
func (t *Tree) refreshLocked(all map[int]stat) []int {
	for pid, start := range t.members {
		if s, ok := all[pid]; !ok || s.start != start || s.dead {
			delete(t.members, pid)
		}
	}
	var joined []int
	for {
		grew := false
		for pid, s := range all {
			if s.dead || pid == t.root {
				continue
			}
			if start, ok := t.members[pid]; ok && start == s.start {
				continue
			}
			if _, parentIn := t.members[s.ppid]; s.ppid == t.root || parentIn {
				t.members[pid] = s.start
				joined = append(joined, pid)
				grew = true
			}
		}
		if !grew {
			return joined
		}
	}
}

// Refresh walks /proc once and adds every live descendant of the root and
// of the members it already has; members that exited leave.
func (t *Tree) Refresh() {
	all := snapshot()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refreshLocked(all)
}

// maxRounds bounds Kill's stop-and-look rounds against a tree that keeps
// forking faster than it is stopped.
const maxRounds = 64

// Kill stops (SIGSTOP) every member and every descendant of the root and
// the members, looking again until a round finds no new process (a
// stopped process cannot fork, so the set converges), then kills them all
// (SIGKILL). The root itself is left alone: its owner ends it. It returns
// the number of processes it killed.
func (t *Tree) Kill() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	stopped := map[int]bool{}
	for range maxRounds {
		t.refreshLocked(snapshot())
		fresh := 0
		for pid, start := range t.members {
			if !stopped[pid] {
				stopped[pid] = true
				signal(pid, start, syscall.SIGSTOP)
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	n := 0
	for pid, start := range t.members {
		if signal(pid, start, syscall.SIGKILL) {
			n++
		}
		delete(t.members, pid)
	}
	return n
}

// signal sends sig to pid if it is still the process that started at
// start. The pidfd behind os.FindProcess pins the process between the
// check and the signal, so a pid reused meanwhile is never signalled.
func signal(pid int, start uint64, sig syscall.Signal) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	defer p.Release()
	if s, ok := readStat(pid); !ok || s.start != start || s.dead {
		return false
	}
	return p.Signal(sig) == nil
}

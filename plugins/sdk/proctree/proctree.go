// Package proctree finds and kills the processes a coordhost policy plugin
// started, however they detached themselves (setsid, setpgid, a double
// fork), so that none survives the plugin. The host side
// (policies/plugin) and the plugin side (plugins/sdk.Serve) share it; it
// works on Linux, where it reads /proc, and does nothing elsewhere.
//
// Membership is tracked, not only looked up: a Tree remembers every
// process (by pid and start time, so a reused pid is never mistaken for a
// member) that it has seen below its root, so a member whose parent exited
// (and which the kernel then reparented to init) is still found. Together
// with the plugin being a child subreaper (BecomeSubreaper, which Serve
// calls), nothing the plugin starts can leave its subtree while it runs.
package proctree

import "sync"

// Tree tracks the descendants of one process, its root. Its methods are
// safe for concurrent use. The zero value is not usable; use New.
type Tree struct {
	root int

	mu      sync.Mutex
	members map[int]uint64 // pid → start time (clock ticks since boot)
}

// New returns a Tree for the descendants of the process root. It reads
// nothing yet: call Refresh.
func New(root int) *Tree {
	return &Tree{root: root, members: map[int]uint64{}}
}

// Root returns the pid of the root process.
func (t *Tree) Root() int { return t.root }

// Members returns the pids of the live descendants seen so far (after the
// last Refresh or Kill), in no particular order.
func (t *Tree) Members() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int, 0, len(t.members))
	for pid := range t.members {
		out = append(out, pid)
	}
	return out
}

//go:build linux

package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// childSysProcAttr returns the attributes for a child coordhost starts.
// ownGroup puts it in a new process group (so that signals can reach all of
// its descendants and a terminal's ^C reaches it only through coordhost).
// Pdeathsig kills the child if coordhost itself dies without cleaning up
// (SIGKILL), so the child does not keep working without the lock and a
// private redis-server does not outlive it. It reaches the direct child
// only: processes that CMD started itself survive a SIGKILL of coordhost
// (a clean exit or a lost lock signals CMD's whole process group).
func childSysProcAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup, Pdeathsig: syscall.SIGKILL}
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// groupHasLiveMember reports whether a process of group pgid has not
// exited yet (one that exited but was not reaped is a zombie, state Z).
// If /proc cannot be read it assumes so.
func groupHasLiveMember(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, ent := range entries {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold anything, so
		// the fields start after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 {
			continue
		}
		if g, err := strconv.Atoi(string(f[2])); err == nil && g == pgid && f[0][0] != 'Z' && f[0][0] != 'X' {
			return true
		}
	}
	return false
}

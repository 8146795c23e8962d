//go:build !linux

package main

import (
	"os"
	"syscall"
)

// childSysProcAttr returns the attributes for a child coordhost starts;
// see proc_linux.go. Outside Linux there is no parent-death signal.
func childSysProcAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}

// isTerminal reports whether f is a terminal. Outside Linux it always says
// no, so children always get their own process group.
func isTerminal(*os.File) bool { return false }

// groupHasLiveMember reports whether group pgid, which has a member, has
// one that has not exited; outside Linux that cannot be told, so yes.
func groupHasLiveMember(int) bool { return true }

//go:build linux

package main

import (
	"os"
	"syscall"
	"unsafe"
)

// childSysProcAttr returns the attributes for a child coordhost starts.
// ownGroup puts it in a new process group (so that signals can reach all of
// its descendants and a terminal's ^C reaches it only through coordhost).
// Pdeathsig kills the child if coordhost itself dies without cleaning up
// (SIGKILL), so no orphan keeps working without the lock or keeps a private
// redis-server running.
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

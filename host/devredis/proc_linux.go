//go:build linux

package devredis

import "syscall"

// sysProcAttr puts the server in its own process group (a terminal's ^C
// must not stop it before coordhost has released its locks) and kills it if
// coordhost dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

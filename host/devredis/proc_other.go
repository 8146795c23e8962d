//go:build !linux

package devredis

import "syscall"

// sysProcAttr puts the server in its own process group; platforms without
// Pdeathsig rely on Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

//go:build linux

package plugin

import "syscall"

// dieWithParent makes the kernel SIGKILL the plugin when the host dies
// without stopping it (SIGKILL, OOM, panic), so no plugin outlives its host.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

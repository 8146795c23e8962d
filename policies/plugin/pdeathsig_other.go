//go:build unix && !linux

package plugin

import "syscall"

// dieWithParent is Linux-only (Pdeathsig); elsewhere Close stops plugins.
func dieWithParent(*syscall.SysProcAttr) {}

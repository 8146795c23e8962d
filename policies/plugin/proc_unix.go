//go:build unix

package plugin

import (
	"errors"
	"os/exec"
	"syscall"
)

// isolate puts the plugin in a process group of its own, so a terminal's
// SIGINT does not reach it (the host decides when it stops) and a kill
// takes the children that stayed in its group with it; otherwise a child
// holding the plugin's stdout or stderr open would keep go-plugin waiting.
// Children that left the group (setsid, setpgid) are found and killed
// through /proc on Linux (see Plugin.stop).
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
	cmd.Cancel = func() error { return killGroup(cmd) }
}

// killGroup SIGKILLs the plugin's process group.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

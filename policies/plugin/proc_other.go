//go:build !unix

package plugin

import (
	"errors"
	"os"
	"os/exec"
)

// isolate does nothing where process groups are not available.
func isolate(*exec.Cmd) {}

// killGroup kills the plugin process.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

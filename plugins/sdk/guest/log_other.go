//go:build !wasip1

package guest

import "os"

// Log sends msg to the host's logger (log/slog, level Info, with the
// policy's name). The host truncates long messages. Do not log on every
// call: it is meant for configuration and rare events.
//
// Outside wasip1 (unit tests of policy code) it writes to standard error.
func Log(msg string) {
	os.Stderr.WriteString("guest: " + msg + "\n")
}

//go:build wasip1

package guest

import "unsafe"

//go:wasmimport policy_host log
func hostLog(ptr unsafe.Pointer, n uint32)

// Log sends msg to the host's logger (log/slog, level Info, with the
// policy's name). The host truncates long messages. Do not log on every
// call: it is meant for configuration and rare events.
func Log(msg string) {
	if len(msg) == 0 {
		return
	}
	hostLog(unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

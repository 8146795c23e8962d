package wasm

import (
	"testing"

	"go.uber.org/goleak"
)

// noNewGoroutines returns a check, to run at the end of a test, that fails
// t if goroutines started since the call remain (goleak retries for a
// while, so goroutines on their way out may finish).
func noNewGoroutines(t *testing.T) func() {
	before := goleak.IgnoreCurrent()
	return func() {
		t.Helper()
		goleak.VerifyNone(t, before)
	}
}

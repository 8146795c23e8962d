package lease

import (
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/wait"
)

// SetClock makes ls's local estimates (and its private Waiter's timers)
// read clk; call it right after New.
func SetClock(ls *Leases, clk clock.Clock) {
	ls.clk = clk
	if ls.owns {
		ls.engine.Close()
		ls.engine = wait.New(ls.client, wait.Options{Clock: clk})
	}
}

// AssumeFieldExpiry makes ls believe the server has hash-field expiry, as
// a cached probe would after the server behind the address changed.
func AssumeFieldExpiry(ls *Leases) { ls.fieldExpiry.Assume(true, ls.clk) }

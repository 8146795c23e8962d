package ratelimit

import (
	"time"

	"github.com/coordhost/coordhost/primitives/internal/clock"
)

// SetClock makes l (and the limiters it makes from now on) read c: the
// INCREX re-probe interval and queue timers follow it.
func SetClock(l *Limiters, c clock.Clock) { l.clk = c }

// SetProbeInterval changes how long a refused INCREX keeps l on Lua.
func SetProbeInterval(l *Limiters, d time.Duration) { l.fast.interval = d }

// SetPartitionClock makes p read now for idle sweeps.
func SetPartitionClock(p *Partitioned, now func() time.Time) { p.clock = now }

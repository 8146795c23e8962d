package faulttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SeedEnv names the environment variable that replays a seed.
const SeedEnv = "COORDHOST_FAULT_SEED"

// Seed returns the seed for a fault run: $COORDHOST_FAULT_SEED when set (a
// decimal uint64; anything else fails t), else a fresh random one. It logs
// the seed with t.Logf either way, with the line that replays it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	if s := strings.TrimSpace(os.Getenv(SeedEnv)); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("faulttest: $%s=%q is not a decimal uint64: %v", SeedEnv, s, err)
		}
		t.Logf("faulttest: seed %d (from $%s)", seed, SeedEnv)
		return seed
	}
	seed := rand.Uint64()
	t.Logf("faulttest: seed %d (replay with %s=%d)", seed, SeedEnv, seed)
	return seed
}

// Fault is one kind of fault a Chaos schedule can pick.
type Fault int

const (
	// Calm injects nothing for the step.
	Calm Fault = iota
	// Latency delays each direction by up to Chaos.MaxLatency for the step.
	Latency
	// ResetOne resets one connection of the target (picked by the plan).
	ResetOne
	// ResetAll resets every connection of the target.
	ResetAll
	// Blackhole stops forwarding for Action.Hold, then heals.
	Blackhole
	// DropReply drops the next Action.Count replies (and resets their
	// connections).
	DropReply
	// DropWindow drops every reply for Action.Hold, then resets the
	// connections that lost one.
	DropWindow
)

// AllFaults lists every Fault, Calm included.
var AllFaults = []Fault{Calm, Latency, ResetOne, ResetAll, Blackhole, DropReply, DropWindow}

func (f Fault) String() string {
	switch f {
	case Calm:
		return "calm"
	case Latency:
		return "latency"
	case ResetOne:
		return "reset-one"
	case ResetAll:
		return "reset-all"
	case Blackhole:
		return "blackhole"
	case DropReply:
		return "drop-reply"
	case DropWindow:
		return "drop-window"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Chaos is a seeded schedule of faults over a set of proxies: one fault per
// Step, drawn from a math/rand/v2 PCG seeded with Seed, for Duration.
// Replaying a seed with the same fields and number of proxies replays the
// same schedule (Plan), not the same interleaving of operations.
type Chaos struct {
	Seed     uint64
	Duration time.Duration
	// Step is the time between faults; 0 means 100ms.
	Step time.Duration
	// Faults are drawn uniformly (list one twice to weight it); nil means
	// AllFaults.
	Faults []Fault
	// MaxLatency bounds Latency faults per direction; 0 means 10ms.
	MaxLatency time.Duration
	// Logf, when set, gets one line per applied action.
	Logf func(format string, args ...any)
}

// Action is one step of a schedule.
type Action struct {
	At     time.Duration // from the start of the run
	Fault  Fault
	Target int // proxy index, or -1 for all proxies
	// Latency is the up and down delay (Latency).
	Latency [2]time.Duration
	// Hold is how long a Blackhole or DropWindow lasts (at most one Step).
	Hold time.Duration
	// Count is the number of replies for DropReply, and the connection
	// index (modulo the open connections, oldest first) for ResetOne.
	Count int
}

func (a Action) String() string {
	target := "all"
	if a.Target >= 0 {
		target = "p" + strconv.Itoa(a.Target)
	}
	s := fmt.Sprintf("%v %s %s", a.At.Round(time.Millisecond), a.Fault, target)
	switch a.Fault {
	case Latency:
		s += fmt.Sprintf(" up=%v down=%v", a.Latency[0], a.Latency[1])
	case Blackhole, DropWindow:
		s += fmt.Sprintf(" for %v", a.Hold)
	case DropReply:
		s += fmt.Sprintf(" n=%d", a.Count)
	case ResetOne:
		s += fmt.Sprintf(" #%d", a.Count)
	}
	return s
}

func (c Chaos) defaults() Chaos {
	if c.Step <= 0 {
		c.Step = 100 * time.Millisecond
	}
	if len(c.Faults) == 0 {
		c.Faults = AllFaults
	}
	if c.MaxLatency <= 0 {
		c.MaxLatency = 10 * time.Millisecond
	}
	return c
}

// Plan returns the schedule for n proxies. It depends only on the fields of
// c (Logf aside) and n.
func (c Chaos) Plan(n int) []Action {
	c = c.defaults()
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	var plan []Action
	for at := time.Duration(0); at < c.Duration; at += c.Step {
		a := Action{At: at, Fault: c.Faults[r.IntN(len(c.Faults))], Target: -1}
		// A quarter of the faults hit every proxy at once, the rest one.
		if n > 0 && r.IntN(4) != 0 {
			a.Target = r.IntN(n)
		}
		switch a.Fault {
		case Latency:
			a.Latency = [2]time.Duration{dur(r, c.MaxLatency) + 1, dur(r, c.MaxLatency) + 1}
		case Blackhole, DropWindow:
			a.Hold = c.Step/5 + dur(r, c.Step-c.Step/5)
		case DropReply:
			a.Count = 1 + r.IntN(3)
		case ResetOne:
			a.Count = r.IntN(8)
		}
		plan = append(plan, a)
	}
	return plan
}

func dur(r *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(r.Int64N(int64(d)))
}

// Report says what a Chaos run applied.
type Report struct {
	Seed    uint64
	Applied []Action
	ByFault map[Fault]int
	Elapsed time.Duration
}

func (r Report) String() string {
	var parts []string
	for _, f := range AllFaults {
		if n := r.ByFault[f]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", f, n))
		}
	}
	return fmt.Sprintf("seed %d: %d steps in %v (%s)", r.Seed, len(r.Applied), r.Elapsed.Round(time.Millisecond), strings.Join(parts, " "))
}

// Run applies the schedule to proxies until it ends or ctx is done, then
// heals every proxy. Each step's fault lasts until the next step (Latency),
// for its Hold (Blackhole, DropWindow) or is instantaneous (resets,
// DropReply: pending drops are cancelled at the next step).
func (c Chaos) Run(ctx context.Context, proxies ...*Proxy) (rep Report) {
	c = c.defaults()
	plan := c.Plan(len(proxies))
	rep = Report{Seed: c.Seed, ByFault: map[Fault]int{}}
	start := time.Now()
	defer func() {
		for _, p := range proxies {
			p.Heal()
		}
		rep.Elapsed = time.Since(start)
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	sleepUntil := func(at time.Duration) bool {
		timer.Reset(time.Until(start.Add(at)))
		select {
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	<-timer.C
	for _, a := range plan {
		if !sleepUntil(a.At) {
			return rep
		}
		// The previous step's faults end where this one begins.
		for _, p := range proxies {
			p.Heal()
		}
		targets := proxies
		if a.Target >= 0 && a.Target < len(proxies) {
			targets = proxies[a.Target : a.Target+1]
		}
		if c.Logf != nil {
			c.Logf("chaos: %v", a)
		}
		rep.Applied = append(rep.Applied, a)
		rep.ByFault[a.Fault]++
		for _, p := range targets {
			switch a.Fault {
			case Latency:
				p.SetLatencyDir(a.Latency[0], a.Latency[1])
			case ResetOne:
				if cs := p.Conns(); len(cs) > 0 {
					cs[a.Count%len(cs)].Reset()
				}
			case ResetAll:
				p.ResetAll()
			case Blackhole:
				p.Blackhole(true)
			case DropReply:
				p.DropReplies(a.Count)
			case DropWindow:
				p.DropRepliesFor(a.Hold)
			}
		}
		if a.Fault == Blackhole {
			if !sleepUntil(a.At + a.Hold) {
				return rep
			}
			for _, p := range targets {
				p.Blackhole(false)
			}
		}
	}
	sleepUntil(c.Duration)
	return rep
}

package probe_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/probe"
)

func TestHasCommandsAndVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		major int
		want  bool
	}{{7, false}, {8, true}} {
		s := redistest.Start(t, redistest.Version(tc.major))
		c := s.Client(t)
		got, err := probe.HasCommands(ctx, c, "hpexpire", "hpttl")
		if err != nil || got != tc.want {
			t.Fatalf("Redis %d: HasCommands = %v, %v", tc.major, got, err)
		}
		if ok, _ := probe.HasCommands(ctx, c, "set"); !ok {
			t.Fatalf("Redis %d: SET unknown", tc.major)
		}
		if v := probe.Version(ctx, c); !strings.HasPrefix(v, "Redis "+string(rune('0'+tc.major))+".") {
			t.Fatalf("Redis %d: version %q", tc.major, v)
		}
	}
}

// A Feature asks once per interval, re-asks after it (on a fake clock), and
// never caches a transport error.
func TestFeatureReprobes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	f := &probe.Feature{Commands: []string{"hpexpire", "nosuchcommand"}, Interval: time.Minute, Clock: clk}
	calls := func() string {
		for _, line := range strings.Split(s.MustCmd(t, "INFO", "commandstats"), "\n") {
			if strings.HasPrefix(line, "cmdstat_command|info:") {
				return line[:strings.Index(line, ",")]
			}
		}
		return ""
	}
	has, version, err := f.Check(ctx, c)
	if err != nil || has || !strings.HasPrefix(version, "Redis 8.") {
		t.Fatalf("Check = %v, %q, %v", has, version, err)
	}
	first := calls()
	clk.Advance(59 * time.Second)
	if has, _, err := f.Check(ctx, c); err != nil || has || calls() != first {
		t.Fatalf("within the interval the Feature asked again: %v %v %s -> %s", has, err, first, calls())
	}
	clk.Advance(2 * time.Second)
	if _, _, err := f.Check(ctx, c); err != nil || calls() == first {
		t.Fatalf("after the interval the Feature did not ask again: %v", err)
	}
	s.Stop()
	clk.Advance(2 * time.Minute)
	if _, _, err := f.Check(ctx, c); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Restart(t)
	has, _, err = f.Check(ctx, c)
	for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		has, _, err = f.Check(ctx, c)
	}
	if err != nil || has {
		t.Fatalf("after a transport error the Feature did not ask again: %v %v", has, err)
	}
}

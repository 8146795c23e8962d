package probe_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
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
		if v := probe.Version(ctx, c); !strings.HasPrefix(v, string(rune('0'+tc.major))+".") {
			t.Fatalf("Redis %d: version %q", tc.major, v)
		}
	}
}

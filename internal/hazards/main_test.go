// Package hazards reproduces the Redis hazards that docs/hazards.md
// catalogues: each test sets up one way the server can lose or move what
// coordhost wrote (a restart without persistence, a failover, eviction, a
// script error, a clock jump, a paused client), measures what happens, and
// checks what coordhost does about it. The tests are the evidence for the
// document's figures; keep the two in step.
//
// Run them with
//
//	. .cache/redis-env.sh && go test ./internal/hazards/
//
// and the long measurements (more runs, bigger samples) with
// -hazards.long.
package hazards_test

import (
	"flag"
	"testing"

	"github.com/coordhost/coordhost/internal/xtest"
)

// long turns on the slow measurements, for the figures in
// docs/hazards.md.
var long = flag.Bool("hazards.long", false, "run the long hazard measurements (more runs, bigger samples)")

func TestMain(m *testing.M) { xtest.Main(m) }

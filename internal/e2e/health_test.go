package e2e

import (
	"strings"
	"testing"
)

// grpc-health-probe's exit codes (its README).
const (
	probeServing   = 0
	probeRPCFailed = 3 // NOT_FOUND for an unknown service is an RPC error
	probeUnhealthy = 4
)

// grpc-health-probe against grpc.health.v1: SERVING for the server ("") and
// each service, NOT_FOUND (exit 3) for a service the daemon lacks, and
// NOT_SERVING (exit 4) once Redis is gone.
func TestHealthProbe(t *testing.T) {
	t.Parallel()
	bin := need(t, healthProbeClient)
	d := startDaemon(t, "")
	probe := func(service string) result {
		t.Helper()
		return runClient(t, "", bin, "-addr", d.Addr, "-service", service, "-connect-timeout", "5s", "-rpc-timeout", "5s")
	}
	for _, svc := range []string{"", "coordhost.v1.SessionService", "coordhost.v1.RateLimitService", "envoy.service.ratelimit.v3.RateLimitService"} {
		if r := probe(svc); r.Code != probeServing || !strings.Contains(r.Stdout+r.Stderr, "SERVING") {
			t.Errorf("service %q: %s\nwant exit %d and SERVING", svc, r, probeServing)
		}
	}
	if r := probe("no.such.Service"); r.Code != probeRPCFailed || !strings.Contains(r.Stdout+r.Stderr, "NotFound") {
		t.Errorf("unknown service: %s\nwant exit %d with NotFound", r, probeRPCFailed)
	}

	d.Redis.Stop()
	if r := probe(""); r.Code != probeUnhealthy || !strings.Contains(r.Stdout+r.Stderr, "NOT_SERVING") {
		t.Errorf("Redis stopped: %s\nwant exit %d and NOT_SERVING", r, probeUnhealthy)
	}
}

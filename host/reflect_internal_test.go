package host

import (
	"net/http"
	"slices"
	"testing"
)

// serviceNames keeps the service prefixes of a handler map and nothing else.
func TestServiceNames(t *testing.T) {
	got := serviceNames(map[string]http.Handler{
		"/coordhost.v1.SessionService/": nil,
		"/grpc.health.v1.Health/":       nil,
		RLSProcedure:                    nil, // one procedure
		"GET /metrics":                  nil,
		"/":                             nil,
		"//":                            nil,
		"/a/b/":                         nil,
	})
	want := []string{"coordhost.v1.SessionService", "grpc.health.v1.Health"}
	if !slices.Equal(got, want) {
		t.Errorf("serviceNames: %q, want %q", got, want)
	}
}

// The reflection handlers mount v1 and v1alpha.
func TestReflectionHandlers(t *testing.T) {
	hs := reflectionHandlers([]string{"coordhost.v1.SessionService"})
	for _, p := range []string{"/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"} {
		if hs[p] == nil {
			t.Errorf("no handler for %s: %v", p, hs)
		}
	}
}

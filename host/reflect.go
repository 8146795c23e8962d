package host

import (
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
)

// reflectionHandlers serves gRPC server reflection, v1 and v1alpha (for
// grpcurl, grpcui, Postman and other tools that learn a schema from the
// server), by path prefix. It lists services (fully-qualified names) and the
// two reflection services themselves; descriptors come from the Go protobuf
// registry, so a listed service's messages resolve as long as its generated
// Go package is linked in (those of connect's grpchealth and grpcreflect
// come from grpcreflect's own embedded copy).
//
// The reflection stream is bidirectional: it needs HTTP/2, like gRPC. opts
// are the handlers' options (apiOptions: with tokens configured, reflection
// needs one too).
func reflectionHandlers(services []string, opts ...connect.HandlerOption) map[string]http.Handler {
	names := slices.Clone(services)
	names = append(names, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName)
	slices.Sort(names)
	names = slices.Compact(names)
	r := grpcreflect.NewStaticReflector(names...)
	p1, h1 := grpcreflect.NewHandlerV1(r, opts...)
	pa, ha := grpcreflect.NewHandlerV1Alpha(r, opts...)
	return map[string]http.Handler{p1: h1, pa: ha}
}

// serviceNames returns the gRPC service names of connect handler path
// prefixes ("/coordhost.v1.SessionService/" → "coordhost.v1.SessionService");
// paths of another shape (a single procedure, a pattern with a method) are
// left out.
func serviceNames(handlers map[string]http.Handler) []string {
	var names []string
	for p := range handlers {
		name, ok := strings.CutPrefix(p, "/")
		if !ok {
			continue
		}
		if name, ok = strings.CutSuffix(name, "/"); !ok || name == "" || strings.Contains(name, "/") {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

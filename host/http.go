package host

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyTimeout bounds the checks behind /readyz.
const readyTimeout = 2 * time.Second

// Handler serves /livez (the process runs), /readyz (Redis answers and the
// policies are loaded), /metrics (Prometheus text format), Envoy's
// rate-limit service (RLSProcedure), coordhost.v1's RateLimitService,
// AdminService and SessionService (all over gRPC, gRPC-Web and Connect) and grpc.health.v1. gRPC needs HTTP/2: serve it with h2c (see H2C) or TLS.
func (h *Host) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := h.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	for p, hd := range h.rlsHandlers() {
		mux.Handle(p, hd)
	}
	for p, hd := range h.apiHandlers() {
		mux.Handle(p, hd)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.metrics.reg, promhttp.HandlerOpts{Registry: h.metrics.reg}))
	return mux
}

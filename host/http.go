package host

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyTimeout bounds the checks behind /readyz.
const readyTimeout = 2 * time.Second

// Handler serves /livez (the process runs), /readyz (Redis answers and the
// policies are loaded), /metrics (Prometheus text format), Envoy's
// rate-limit service (RLSProcedure), the coordhost.v1 services (over
// gRPC, gRPC-Web and Connect), grpc.health.v1 and gRPC server reflection
// (v1 and v1alpha, listing those services). gRPC needs HTTP/2: serve it with TLS, or cleartext
// HTTP/2 (http.Protocols with UnencryptedHTTP2, as coordhost serve does).
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
	mux.Handle(RLSProcedure, h.rlsHandler())
	api := h.apiHandlers()
	for p, hd := range api {
		mux.Handle(p, hd)
	}
	for p, hd := range reflectionHandlers(append(serviceNames(api), RLSService), h.apiOptions()...) {
		mux.Handle(p, hd)
	}
	mux.Handle("GET /metrics", h.metricsAuth(promhttp.HandlerFor(h.metrics.reg, promhttp.HandlerOpts{Registry: h.metrics.reg})))
	return h.clientCertGate(h.apiGate(mux))
}

// apiHandlers returns the coordhost.v1 services served so far and the gRPC health
// service (SERVING while Ready succeeds, for "" and healthServices), by
// path prefix.
func (h *Host) apiHandlers() map[string]http.Handler {
	opt := h.apiOptions()
	rp, rh := coordhostv1connect.NewRateLimitServiceHandler(rateLimitService{h}, opt...)
	ap, ah := coordhostv1connect.NewAdminServiceHandler(adminService{h}, opt...)
	sp, sh := coordhostv1connect.NewSessionServiceHandler(sessionService{h}, opt...)
	lp, lh := coordhostv1connect.NewLockServiceHandler(lockService{h}, opt...)
	ep, eh := coordhostv1connect.NewLeaseServiceHandler(leaseService{h}, opt...)
	wp, wh := coordhostv1connect.NewRWLockServiceHandler(rwlockService{h}, opt...)
	mp, mh := coordhostv1connect.NewSemaphoreServiceHandler(semaphoreService{h}, opt...)
	xp, xh := coordhostv1connect.NewLatchServiceHandler(latchService{h}, opt...)
	hp, hh := grpchealth.NewHandler(healthChecker{h})
	return map[string]http.Handler{rp: rh, ap: ah, sp: sh, lp: lh, ep: eh, wp: wh, mp: mh, xp: xh, hp: hh}
}

// healthServices are the services grpc.health.v1 answers for, besides "".
var healthServices = []string{RLSService, coordhostv1connect.RateLimitServiceName, coordhostv1connect.AdminServiceName,
	coordhostv1connect.SessionServiceName, coordhostv1connect.LockServiceName, coordhostv1connect.LeaseServiceName,
	coordhostv1connect.RWLockServiceName, coordhostv1connect.SemaphoreServiceName, coordhostv1connect.LatchServiceName}

// healthChecker answers grpc.health.v1 from Host.Ready.
type healthChecker struct{ h *Host }

func (c healthChecker) Check(ctx context.Context, r *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if r.Service != "" && !slices.Contains(healthServices, r.Service) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", r.Service))
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := c.h.Ready(ctx); err != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

package host

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Envoy rate-limit service (envoy.service.ratelimit.v3.RateLimitService).
const (
	// RLSProcedure is ShouldRateLimit's path.
	RLSProcedure = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	// RLSService is the service name, as the health service knows it.
	RLSService = "envoy.service.ratelimit.v3.RateLimitService"
	// EnvoyKeySpace leads the keys of the limiters the rate-limit service
	// uses, after config.RateLimitPrefix: "envoy:" + algorithm + ":" +
	// name + "/" + partition key. No algorithm is named "envoy", so these
	// keys never meet those of RateLimit calls, whatever key a partition
	// policy returns.
	EnvoyKeySpace = "envoy:"
	// MaxRLSDescriptors is the most descriptors one request may carry.
	MaxRLSDescriptors = 64
	// MaxRLSRequestBytes bounds an encoded request; a larger one is
	// refused by connect with ResourceExhausted before it is decoded.
	MaxRLSRequestBytes = 64 << 10
)

// rlsMetrics count the rate-limit service's decisions, by configured
// domain ("" for a domain no envoy_rate_limit serves, so that clients
// cannot create series).
type rlsMetrics struct {
	decisions *prometheus.CounterVec // domain, outcome
	unknown   *prometheus.CounterVec // domain
}

func newRLSMetrics() *rlsMetrics {
	return &rlsMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_rls_decisions_total",
			Help: "ShouldRateLimit requests of the Envoy rate-limit service, by domain (\"\" when not configured) and outcome (ok, over_limit, invalid, error).",
		}, []string{"domain", "outcome"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_rls_unknown_descriptors_total",
			Help: "Descriptors of ShouldRateLimit requests that matched no descriptor block (allowed, with no limit), by domain (\"\" when not configured).",
		}, []string{"domain"}),
	}
}

func (m *rlsMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.decisions, m.unknown}
}

// rlsHandler returns the Envoy rate-limit service's handler.
func (h *Host) rlsHandler() http.Handler {
	return connect.NewUnaryHandler(RLSProcedure, h.shouldRateLimit, append(h.apiOptions(), connect.WithReadMaxBytes(MaxRLSRequestBytes))...)
}

// rlsDecision is one descriptor's plan: the rate limit to ask (nil for an
// unknown descriptor), its partition key and permits.
type rlsDecision struct {
	rl   *RateLimit
	key  string
	hits int64
}

// shouldRateLimit serves ShouldRateLimit. Every descriptor is checked
// before the first is decided, so a bad request writes nothing.
//
// Statuses: InvalidArgument (naming the field) for an empty domain, no or
// too many descriptors, a descriptor without entries or with an empty key,
// is_negative_hits, a hits_addend above config.MaxRateLimit, or a
// partition key longer than ratelimit.MaxPartitionKey; Unavailable when
// Redis fails (Envoy then applies its failure_mode_deny: by default it
// lets the request through); Canceled or DeadlineExceeded with the ctx.
func (h *Host) shouldRateLimit(ctx context.Context, req *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
	m := req.Msg
	cfg := h.gen.Load().cfg
	dom := cfg.EnvoyDomain(m.GetDomain())
	label := ""
	if dom != nil {
		label = dom.Domain
	}
	plan, unknown, err := h.rlsPlan(m, dom)
	if errors.Is(err, errRLSUnavailable) {
		h.metrics.rls.decisions.WithLabelValues(label, "error").Inc()
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if err != nil {
		h.metrics.rls.decisions.WithLabelValues(label, "invalid").Inc()
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if unknown > 0 {
		h.metrics.rls.unknown.WithLabelValues(label).Add(float64(unknown))
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(plan))}
	for i, p := range plan {
		if p.rl == nil {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		}
		res, err := p.rl.envoyTryAcquire(ctx, p.key, p.hits)
		if err != nil {
			h.metrics.rls.decisions.WithLabelValues(label, "error").Inc()
			return nil, rlsError(ctx, i, err)
		}
		st := rlsStatus(p.rl.name, res)
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = st
	}
	outcome := "ok"
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		outcome = "over_limit"
	}
	h.metrics.rls.decisions.WithLabelValues(label, outcome).Inc()
	return connect.NewResponse(resp), nil
}

// errRLSUnavailable marks a plan that failed for the host's sake (it is
// closed), not the request's.
var errRLSUnavailable = errors.New("the rate-limit service is shutting down")

// rlsPlan validates m and matches its descriptors against dom (nil: the
// domain is not configured, every descriptor is unknown). It returns the
// plan and how many descriptors are unknown.
func (h *Host) rlsPlan(m *rlsv3.RateLimitRequest, dom *config.EnvoyRateLimit) ([]rlsDecision, int, error) {
	if m.GetDomain() == "" {
		return nil, 0, errors.New("domain: empty")
	}
	ds := m.GetDescriptors()
	if len(ds) == 0 {
		return nil, 0, errors.New("descriptors: none")
	}
	if len(ds) > MaxRLSDescriptors {
		return nil, 0, fmt.Errorf("descriptors: %d, at most %d", len(ds), MaxRLSDescriptors)
	}
	plan := make([]rlsDecision, len(ds))
	unknown := 0
	for i, d := range ds {
		keys, values, err := rlsEntries(i, d)
		if err != nil {
			return nil, 0, err
		}
		hits := int64(m.GetHitsAddend())
		if hits == 0 {
			hits = 1 // as Envoy and envoyproxy/ratelimit read an absent hits_addend
		}
		if v := d.GetHitsAddend(); v != nil {
			if v.GetValue() > config.MaxRateLimit {
				return nil, 0, fmt.Errorf("descriptors[%d].hits_addend: %d, at most %d", i, v.GetValue(), int64(config.MaxRateLimit))
			}
			// Set on the descriptor, it wins; an explicit 0 checks the
			// limit without counting (a peek), as envoyproxy/ratelimit
			// reads it.
			hits = int64(v.GetValue())
		}
		if d.GetIsNegativeHits() {
			return nil, 0, fmt.Errorf("descriptors[%d].is_negative_hits: not supported (permits are never given back)", i)
		}
		var match *config.EnvoyDescriptor
		if dom != nil {
			match = dom.Match(keys, values)
		}
		if match == nil {
			unknown++
			continue
		}
		key := rlsPartitionKey(dom.Domain, keys, values)
		// The limiter's partition is the rate limit's name, "/" and key.
		if n := len(match.RateLimit) + 1 + len(key); n > ratelimit.MaxPartitionKey {
			return nil, 0, fmt.Errorf("descriptors[%d].entries: partition key of %d bytes (with rate_limit %q), at most %d", i, n, match.RateLimit, ratelimit.MaxPartitionKey)
		}
		rl, err := h.RateLimit(match.RateLimit)
		if err != nil {
			// config checked the name; only a closed Host gets here.
			return nil, 0, fmt.Errorf("%w: descriptors[%d]: %w", errRLSUnavailable, i, err)
		}
		plan[i] = rlsDecision{rl: rl, key: key, hits: hits}
	}
	return plan, unknown, nil
}

// rlsEntries returns descriptor i's keys and values.
func rlsEntries(i int, d *rlcommon.RateLimitDescriptor) ([]string, []string, error) {
	es := d.GetEntries()
	if len(es) == 0 {
		return nil, nil, fmt.Errorf("descriptors[%d].entries: none", i)
	}
	keys, values := make([]string, len(es)), make([]string, len(es))
	for j, e := range es {
		if e.GetKey() == "" {
			return nil, nil, fmt.Errorf("descriptors[%d].entries[%d].key: empty", i, j)
		}
		keys[j], values[j] = e.GetKey(), e.GetValue()
	}
	return keys, values, nil
}

// rlsPartitionKey is the partition key of a matched descriptor: the
// domain, "/", then key=value for every entry in request order, joined by
// "&", each part query-escaped (url.QueryEscape) so that no two
// descriptors share a key: domain "edge" and remote_address 10.0.0.1 give
// "edge/remote_address=10.0.0.1".
func rlsPartitionKey(domain string, keys, values []string) string {
	var b strings.Builder
	b.WriteString(url.QueryEscape(domain))
	b.WriteByte('/')
	for i := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(keys[i]))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(values[i]))
	}
	return b.String()
}

// rlsError maps the error of descriptor i's decision to a status.
func rlsError(ctx context.Context, i int, err error) error {
	err = fmt.Errorf("descriptors[%d]: %w", i, err)
	if code, ok := ctxCode(ctx, err); ok {
		return connect.NewError(code, err)
	}
	// Redis (or the limiter) failed: Envoy fails open on errors unless
	// failure_mode_deny is set, which is the operator's choice to make.
	return connect.NewError(connect.CodeUnavailable, err)
}

// envoyUnits are the Envoy units, longest first, for rlsLimit.
var envoyUnits = []struct {
	d time.Duration
	u rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// rlsLimit reports limit permits per window as Envoy's RateLimit: the
// longest unit that divides the window, with unit_multiplier when the
// window is several units (1m30s: SECOND with unit_multiplier 90). A window that is not whole seconds is rounded up to whole
// seconds (the reported rate is never above the true one). Counts above
// 2^32-1 are reported as 2^32-1.
func rlsLimit(name string, limit int64, window time.Duration) *rlsv3.RateLimitResponse_RateLimit {
	secs := (window + time.Second - 1) / time.Second
	w := secs * time.Second
	out := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clampU32(limit), Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	for _, u := range envoyUnits {
		if w%u.d == 0 {
			out.Unit = u.u
			if k := int64(w / u.d); k != 1 {
				out.UnitMultiplier = wrapperspb.UInt32(clampU32(k))
			}
			break
		}
	}
	return out
}

func clampU32(n int64) uint32 {
	if n < 0 {
		return 0
	}
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

// rlsStatus is the status of one decision: OK or OVER_LIMIT; the rate
// limit's Limit per Window (a token bucket's size per its time to fill
// from empty, as in RateLimit-Policy headers); the remaining permits; and
// duration_until_reset: ResetAfter when granted, RetryAfter when not
// (ResetAfter when the request can never succeed).
func rlsStatus(name string, res ratelimit.Result) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:           rlsv3.RateLimitResponse_OK,
		CurrentLimit:   rlsLimit(name, res.Limit, res.Window),
		LimitRemaining: clampU32(res.Remaining),
	}
	reset := res.ResetAfter
	if !res.Acquired {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		if res.RetryAfter > 0 {
			reset = res.RetryAfter
		}
	}
	st.DurationUntilReset = durationpb.New(reset)
	return st
}

// envoyTryAcquire decides n permits for the Envoy partition key, in the
// rate limit's Envoy key space (EnvoyKeySpace), counted in
// coordhost_ratelimit_decisions_total like TryAcquire.
func (r *RateLimit) envoyTryAcquire(ctx context.Context, key string, n int64) (ratelimit.Result, error) {
	res, err := withNamed(r.h, "rate_limit", r.name, ErrNoRateLimit, r.lookup, func(nr *namedRateLimit) (ratelimit.Result, error) {
		res, err := nr.prim.envoy.TryAcquire(ctx, r.name+"/"+key, n)
		if err != nil {
			return res, fmt.Errorf("rate_limit %q: %w", r.name, err)
		}
		return res, nil
	})
	r.h.metrics.ratelimit.observe(r.name, res, err)
	return res, err
}

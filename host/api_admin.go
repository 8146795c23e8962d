package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/coordhost/coordhost/config"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/hashicorp/hcl/v2"
	"google.golang.org/protobuf/types/known/durationpb"
)

// DefaultValidateFilename is ValidateRequest.filename when not given.
const DefaultValidateFilename = "request.hcl"

// adminService serves coordhost.v1.AdminService.
type adminService struct{ h *Host }

// Reload serves AdminService.Reload: Host.Reload. A configuration that
// does not load (or build) is applied false with diagnostics, not an
// error; Unavailable once the Host is closed; Canceled or
// DeadlineExceeded with the call.
func (s adminService) Reload(ctx context.Context, _ *connect.Request[coordhostv1.ReloadRequest]) (*connect.Response[coordhostv1.ReloadResponse], error) {
	err := s.h.Reload(ctx)
	out := &coordhostv1.ReloadResponse{Applied: err == nil}
	var re *ReloadError
	switch {
	case err == nil:
	case errors.As(err, &re):
		out.Diagnostics = diagnostics(re.Diags)
	case errors.Is(err, ErrClosed):
		return nil, connect.NewError(connect.CodeUnavailable, err)
	case ctx.Err() != nil:
		return nil, connect.NewError(connect.CodeOf(ctx.Err()), err)
	default:
		// Built aside and failed (a policy that did not load, a changed
		// redis block): one diagnostic without a place; the message says
		// where when the builder knew.
		out.Diagnostics = []*coordhostv1.Diagnostic{{Severity: coordhostv1.Severity_SEVERITY_ERROR, Summary: "Reload failed", Detail: err.Error()}}
	}
	out.Generation = s.h.Generation()
	return connect.NewResponse(out), nil
}

// Validate serves AdminService.Validate: config.Parse of the request's
// source (named filename, default DefaultValidateFilename; a relative name
// is resolved against the daemon's configuration directory), or
// config.Load of the daemon's own file when source is empty. Nothing is
// built, started or written: policies are not loaded. InvalidArgument
// naming "filename" for a name with a NUL or over MaxAPINameBytes.
//
// A source is parsed sandboxed (config.LoadOptions.Sandbox), without the
// daemon's -var values: it can neither read nor probe the daemon's files
// or environment (file(), secret_file, secret_env, module and path are
// errors), so no diagnostic can carry what they hold.
func (s adminService) Validate(ctx context.Context, req *connect.Request[coordhostv1.ValidateRequest]) (*connect.Response[coordhostv1.ValidateResponse], error) {
	m := req.Msg
	cur := s.h.Config()
	var diags hcl.Diagnostics
	if len(m.GetSource()) == 0 {
		_, diags = config.Load(cur.Path, s.h.opts.Load)
	} else {
		name := m.GetFilename()
		if len(name) > MaxAPINameBytes {
			return nil, invalidField("filename", "", "%d bytes, at most %d", len(name), MaxAPINameBytes)
		}
		for i := 0; i < len(name); i++ {
			if name[i] == 0 {
				return nil, invalidField("filename", "", "contains NUL")
			}
		}
		if name == "" {
			name = DefaultValidateFilename
		}
		if !filepath.IsAbs(name) {
			name = filepath.Join(cur.Dir, name)
		}
		_, diags = config.Parse(m.GetSource(), name, config.LoadOptions{Sandbox: true})
	}
	return connect.NewResponse(&coordhostv1.ValidateResponse{Valid: !diags.HasErrors(), Diagnostics: diagnostics(diags)}), nil
}

// diagnostics converts HCL diagnostics, with subject "file:line:column".
func diagnostics(diags hcl.Diagnostics) []*coordhostv1.Diagnostic {
	out := make([]*coordhostv1.Diagnostic, 0, len(diags))
	for _, d := range diags {
		pd := &coordhostv1.Diagnostic{Severity: coordhostv1.Severity_SEVERITY_ERROR, Summary: d.Summary, Detail: d.Detail}
		if d.Severity == hcl.DiagWarning {
			pd.Severity = coordhostv1.Severity_SEVERITY_WARNING
		}
		if r := d.Subject; r != nil {
			pd.Subject = fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
		}
		out = append(out, pd)
	}
	return out
}

// ListPrimitives serves AdminService.ListPrimitives: the blocks of the
// configuration in use, sorted by kind, then name; kind filters when set.
// InvalidArgument naming "kind" for a value the proto does not define.
func (s adminService) ListPrimitives(ctx context.Context, req *connect.Request[coordhostv1.ListPrimitivesRequest]) (*connect.Response[coordhostv1.ListPrimitivesResponse], error) {
	kind := req.Msg.GetKind()
	if _, ok := coordhostv1.PrimitiveKind_name[int32(kind)]; !ok {
		return nil, invalidField("kind", "", "unknown value %d", kind)
	}
	// One load: the list and the generation belong together.
	g := s.h.gen.Load()
	gen := s.h.Generation()
	var ps []*coordhostv1.Primitive
	add := func(k coordhostv1.PrimitiveKind, name string, p *coordhostv1.Primitive, refs ...policyRole) {
		if kind != coordhostv1.PrimitiveKind_PRIMITIVE_KIND_UNSPECIFIED && kind != k {
			return
		}
		p.Kind, p.Name = k, name
		for _, r := range refs {
			if r.ref != nil {
				if p.Policies == nil {
					p.Policies = map[string]string{}
				}
				p.Policies[r.role] = r.ref.Name
			}
		}
		ps = append(ps, p)
	}
	cfg := g.cfg
	for _, c := range cfg.Locks {
		add(coordhostv1.PrimitiveKind_PRIMITIVE_KIND_LOCK, c.Name, &coordhostv1.Primitive{Ttl: ttl(c.TTL), Fencing: c.Fencing},
			policyRole{"retry", c.Retry}, policyRole{"partition", c.Partition})
	}
	for _, c := range cfg.Redlocks {
		add(coordhostv1.PrimitiveKind_PRIMITIVE_KIND_REDLOCK, c.Name, &coordhostv1.Primitive{Ttl: ttl(c.TTL)},
			policyRole{"retry", c.Retry}, policyRole{"partition", c.Partition})
	}
	for _, c := range cfg.RWLocks {
		add(coordhostv1.PrimitiveKind_PRIMITIVE_KIND_RWLOCK, c.Name, &coordhostv1.Primitive{Ttl: ttl(c.TTL)},
			policyRole{"starvation", c.Starvation}, policyRole{"retry", c.Retry}, policyRole{"partition", c.Partition})
	}
	for _, c := range cfg.Semaphores {
		add(coordhostv1.PrimitiveKind_PRIMITIVE_KIND_SEMAPHORE, c.Name, &coordhostv1.Primitive{Ttl: ttl(c.TTL), Limit: int64(c.Capacity)},
			policyRole{"retry", c.Retry}, policyRole{"partition", c.Partition})
	}
	for _, c := range cfg.Leases {
		add(coordhostv1.PrimitiveKind_PRIMITIVE_KIND_LEASE, c.Name, &coordhostv1.Primitive{Ttl: ttl(c.TTL)},
			policyRole{"retry", c.Retry}, policyRole{"partition", c.Partition})
	}
	for _, c := range cfg.Latches {
		add(coordhostv1.PrimitiveKind_PRIMITIVE_KIND_LATCH, c.Name, &coordhostv1.Primitive{},
			policyRole{"retry", c.Retry}, policyRole{"partition", c.Partition})
	}
	for _, c := range cfg.RateLimits {
		p := &coordhostv1.Primitive{Limit: c.Limit, Algorithm: string(c.Algorithm)}
		w := c.Window
		if c.Algorithm == config.TokenBucket {
			w = c.Period
		}
		if w > 0 {
			p.Window = durationpb.New(w)
		}
		add(coordhostv1.PrimitiveKind_PRIMITIVE_KIND_RATE_LIMIT, c.Name, p, policyRole{"partition", c.Partition})
	}
	slices.SortFunc(ps, func(a, b *coordhostv1.Primitive) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return connect.NewResponse(&coordhostv1.ListPrimitivesResponse{Primitives: ps, Generation: gen}), nil
}

type policyRole struct {
	role string
	ref  *config.PolicyRef
}

// ttl is a grant's lease for Primitive.ttl: unset for none (negative, the
// config's "none") or zero.
func ttl(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}

// ListPolicies serves AdminService.ListPolicies: the policies of the
// configuration in use, sorted by role, then name, each with the
// primitives that use it ("kind.name", sorted).
func (s adminService) ListPolicies(ctx context.Context, _ *connect.Request[coordhostv1.ListPoliciesRequest]) (*connect.Response[coordhostv1.ListPoliciesResponse], error) {
	g := s.h.gen.Load()
	gen := s.h.Generation()
	cfg := g.cfg
	users := map[string][]string{} // "role.name" -> "kind.name"
	use := func(kind, name string, refs ...*config.PolicyRef) {
		for _, r := range refs {
			if r != nil {
				k := string(r.Kind) + "." + r.Name
				users[k] = append(users[k], kind+"."+name)
			}
		}
	}
	for _, c := range cfg.Locks {
		use("lock", c.Name, c.Retry, c.Partition)
	}
	for _, c := range cfg.Redlocks {
		use("redlock", c.Name, c.Retry, c.Partition)
	}
	for _, c := range cfg.RWLocks {
		use("rwlock", c.Name, c.Starvation, c.Retry, c.Partition)
	}
	for _, c := range cfg.Semaphores {
		use("semaphore", c.Name, c.Retry, c.Partition)
	}
	for _, c := range cfg.Leases {
		use("lease", c.Name, c.Retry, c.Partition)
	}
	for _, c := range cfg.Latches {
		use("latch", c.Name, c.Retry, c.Partition)
	}
	for _, c := range cfg.RateLimits {
		use("rate_limit", c.Name, c.Partition)
	}
	ps := make([]*coordhostv1.Policy, 0, len(cfg.Policies))
	for _, p := range cfg.Policies {
		u := users[string(p.Kind)+"."+p.Name]
		slices.Sort(u)
		ps = append(ps, &coordhostv1.Policy{Role: string(p.Kind), Name: p.Name, Driver: string(p.Driver), UsedBy: u})
	}
	slices.SortFunc(ps, func(a, b *coordhostv1.Policy) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.Name, b.Name))
	})
	return connect.NewResponse(&coordhostv1.ListPoliciesResponse{Policies: ps, Generation: gen}), nil
}

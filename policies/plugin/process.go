package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/coordhost/coordhost/plugins/sdk"
	"github.com/coordhost/coordhost/plugins/sdk/proctree"
	"github.com/coordhost/coordhost/plugins/sdk/proto/policyv1"
	"github.com/coordhost/coordhost/policies"
)

// closeGrace is how long Close lets a plugin exit after go-plugin's
// Shutdown call before it is killed.
const closeGrace = time.Second

// proc is one running plugin process.
type proc struct {
	client  *goplugin.Client
	api     *sdk.Client
	run     *procRunner
	kill    context.CancelFunc // SIGKILLs the process group (exec.CommandContext)
	tree    *proctree.Tree     // the processes the plugin started (see stop)
	pid     int
	started time.Time
}

// procRunner is the runner.Runner go-plugin drives (through
// ClientConfig.RunnerFunc). Going through a runner rather than
// ClientConfig.Cmd lets us build the exec.Cmd ourselves: the environment is
// exactly the variables go-plugin hands us (never os.Environ()), stdin is
// /dev/null, the process dies when its context is cancelled, and exited
// tells the supervisor the moment the process is gone. go-plugin creates a
// private socket directory for it and removes it on Kill, even after a
// SIGKILL.
type procRunner struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stderr io.ReadCloser
	pid    atomic.Int64
	exited chan struct{} // closed when Wait returns
}

var _ runner.Runner = (*procRunner)(nil)

func (r *procRunner) Start(context.Context) error {
	if err := r.cmd.Start(); err != nil {
		return err
	}
	r.pid.Store(int64(r.cmd.Process.Pid))
	return nil
}

func (r *procRunner) Wait(context.Context) error {
	defer close(r.exited)
	return r.cmd.Wait()
}

func (r *procRunner) Kill(context.Context) error { return killGroup(r.cmd) }

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.cmd.Path }

// ID is the pid, or "" before the process started (go-plugin's Kill then
// has nothing to do).
func (r *procRunner) ID() string {
	if pid := r.pid.Load(); pid != 0 {
		return strconv.FormatInt(pid, 10)
	}
	return ""
}

func (r *procRunner) Diagnose(context.Context) string {
	return "the executable did not complete the coordhost plugin handshake: is it a coordhost policy plugin " +
		"(plugins/sdk.Serve) built for this platform, with the same sdk.ProtocolVersion?"
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// checkSHA256 hashes the executable with go-plugin's SecureConfig.
func (p *Plugin) checkSHA256() error {
	want, _ := hex.DecodeString(p.opts.SHA256) // validated by withDefaults
	sc := &goplugin.SecureConfig{Checksum: want, Hash: sha256.New()}
	ok, err := sc.Check(p.opts.Path)
	if err != nil {
		return fmt.Errorf("plugin %q: hashing %s: %w", p.opts.Name, p.opts.Path, err)
	}
	if !ok {
		got := "unknown"
		if b, err := os.ReadFile(p.opts.Path); err == nil {
			sum := sha256.Sum256(b)
			got = hex.EncodeToString(sum[:])
		}
		return fmt.Errorf("%w: plugin %q: %s has sha256 %s, configured %s; refusing to start it",
			ErrChecksum, p.opts.Name, p.opts.Path, got, p.opts.SHA256)
	}
	return nil
}

// start launches one plugin process, completes the handshake, checks its
// kinds (against p.kinds when set) and configures it. Cancelling ctx or
// p.life during the start kills the process; after start returns, only
// p.life and proc.kill do.
func (p *Plugin) start(ctx context.Context) (*proc, error) {
	procCtx, kill := context.WithCancel(p.life)
	stopWatch := context.AfterFunc(ctx, kill)
	defer stopWatch()

	var run *procRunner
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  sdk.HandshakeConfig(),
		Plugins:          sdk.PluginSet(),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		SkipHostEnv:      true,
		StartTimeout:     p.opts.StartTimeout,
		Logger:           p.hlog,
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, socketDir string) (runner.Runner, error) {
			// go-plugin created socketDir before calling us and removes it
			// only once a runner exists; clean up on our own errors.
			if err := p.checkSHA256(); err != nil {
				_ = os.RemoveAll(socketDir)
				return nil, err
			}
			cmd := exec.CommandContext(procCtx, p.opts.Path, p.opts.Args...)
			// spec.Env holds only go-plugin's variables (SkipHostEnv).
			cmd.Env = slices.Clone(spec.Env)
			cmd.Stdin = nil
			isolate(cmd)
			r := &procRunner{cmd: cmd, exited: make(chan struct{})}
			var err error
			if r.stdout, err = cmd.StdoutPipe(); err == nil {
				r.stderr, err = cmd.StderrPipe()
			}
			if err != nil {
				_ = os.RemoveAll(socketDir)
				return nil, err
			}
			run = r
			return r, nil
		},
	})
	fail := func(what string, err error) (*proc, error) {
		if run != nil {
			if pid := int(run.pid.Load()); pid != 0 {
				proctree.New(pid).Kill() // what it started, e.g. while configuring
			}
		}
		kill()
		client.Kill()
		if errors.Is(err, ErrChecksum) {
			return nil, err
		}
		// The error may carry the plugin's own text (a gRPC status message,
		// a line it printed instead of the handshake): escape it.
		err = policies.EscapeError(err)
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			// ctx killed the process; say so rather than only "exited".
			return nil, fmt.Errorf("plugin %q: %s: %w (%w)", p.opts.Name, what, cause, err)
		}
		return nil, fmt.Errorf("plugin %q: %s: %w", p.opts.Name, what, err)
	}
	rpc, err := client.Client()
	if err != nil {
		return fail("start", err)
	}
	raw, err := rpc.Dispense(sdk.PluginName)
	if err != nil {
		return fail("dispense", err)
	}
	api, ok := raw.(*sdk.Client)
	if !ok {
		return fail("dispense", fmt.Errorf("unexpected client type %T", raw))
	}
	callCtx, cancel := context.WithTimeout(procCtx, p.opts.StartTimeout)
	defer cancel()
	kr, err := api.Policy.Kinds(callCtx, &policyv1.KindsRequest{})
	if err != nil {
		return fail("kinds", err)
	}
	kinds, err := decodeKinds(kr.GetKinds())
	if err != nil {
		return fail("kinds", err)
	}
	if p.kinds != nil && !slices.Equal(kinds, p.kinds) {
		return fail("kinds", fmt.Errorf("restarted plugin serves %v, first start served %v", kinds, p.kinds))
	}
	if _, err := api.Policy.Configure(callCtx, &policyv1.ConfigureRequest{Config: p.opts.Config}); err != nil {
		return fail("configure", err)
	}
	if !stopWatch() {
		// ctx ended during the start and killed the process.
		return fail("start", errors.New("start interrupted"))
	}
	pr := &proc{client: client, api: api, run: run, kill: kill, started: time.Now()}
	pr.pid = int(run.pid.Load())
	pr.tree = proctree.New(pr.pid)
	pr.tree.Refresh() // e.g. helpers started by Configure
	if p.kinds == nil {
		p.kinds = kinds
	}
	return pr, nil
}

// decodeKinds checks and sorts the kinds a plugin advertises.
func decodeKinds(in []policyv1.Kind) ([]policies.Kind, error) {
	var out []policies.Kind
	for _, k := range in {
		kind, ok := sdk.KindFromProto(k)
		if !ok {
			return nil, fmt.Errorf("unknown kind %v", k)
		}
		if !slices.Contains(out, kind) {
			out = append(out, kind)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("plugin serves no kind")
	}
	slices.Sort(out)
	return out, nil
}

// stop ends a process and every process it started. graceful asks it to
// exit (go-plugin's Shutdown) and kills it after closeGrace; otherwise it
// is killed at once. Either way, go-plugin's goroutines and socket
// directory are gone when stop returns.
//
// What the plugin started dies first, while the plugin still runs: a
// plugin built with plugins/sdk is a child subreaper on Linux, so
// everything it started, however detached (setsid, setpgid, a double
// fork), is still below it in /proc. pr.tree stops those processes
// (SIGSTOP, until no new one appears) and kills them (SIGKILL); so it does
// with every process it saw below the plugin earlier (at start, at every
// health tick) that was reparented away since (a plugin that crashed, or
// one not built with the SDK). After the plugin has gone, a second pass
// catches what it started while shutting down, if seen. The process group
// kill (isolate) remains for platforms without /proc.
func (p *Plugin) stop(pr *proc, graceful bool) {
	pr.tree.Kill()
	if graceful {
		t := time.AfterFunc(closeGrace, pr.kill)
		defer t.Stop()
	} else {
		pr.kill()
	}
	pr.client.Kill()
	pr.kill()
	pr.tree.Kill()
}

// ping runs one gRPC health check against the process.
func (p *Plugin) ping(ctx context.Context, pr *proc) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.PingTimeout)
	defer cancel()
	resp, err := pr.api.Health.Check(ctx, &healthpb.HealthCheckRequest{Service: goplugin.GRPCServiceName})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %v", s)
	}
	return nil
}

// restartDelay is the wait before restart attempt n (from 0):
// RestartBackoff·2^n, capped at RestartBackoffMax.
func restartDelay(o Options, n int) time.Duration {
	d := o.RestartBackoff
	for ; n > 0 && d < o.RestartBackoffMax; n-- {
		d *= 2
	}
	return min(d, o.RestartBackoffMax)
}

// supervise owns the process lifecycle from Launch to Close: it pings the
// current process every HealthInterval (and after a failed call), and when
// the process exits or a ping fails it takes the plugin down (decisions
// fall back from then on) and restarts it with capped exponential backoff.
// Decisions never wait for it.
func (p *Plugin) supervise(cur *proc) {
	defer p.wg.Done()
	log := p.opts.Logger.With("plugin", p.opts.Name)
	tick := time.NewTicker(p.opts.HealthInterval)
	defer tick.Stop()
	attempt := 0 // restarts since the last process that stayed healthy
	for {
		// Serving: watch the process.
		var why error
		for why == nil {
			select {
			case <-p.done:
				p.cur.Store(nil)
				p.stop(cur, true)
				return
			case <-cur.run.exited:
				why = errors.New("process exited")
				if st := cur.run.cmd.ProcessState; st != nil {
					why = fmt.Errorf("process exited: %s", st)
				}
			case <-tick.C:
				cur.tree.Refresh() // remember what it started, should it die
				why = p.ping(p.stopping, cur)
			case <-p.kick:
				why = p.ping(p.stopping, cur)
			}
		}
		p.cur.Store(nil)
		if p.closed() {
			// The ping was cut short by Close, not by the plugin.
			p.stop(cur, true)
			return
		}
		log.Warn("policy plugin down; decisions fall back until it is restarted", "pid", cur.pid, "err", policies.EscapeError(why))
		if time.Since(cur.started) >= p.opts.RestartBackoffMax {
			attempt = 0
		}
		p.stop(cur, false)

		// Down: restart with backoff.
		for {
			d := restartDelay(p.opts, attempt)
			attempt++
			t := time.NewTimer(d)
			select {
			case <-p.done:
				t.Stop()
				return
			case <-t.C:
			}
			next, err := p.start(p.stopping)
			if err != nil && p.closed() {
				return // Close interrupted the start
			}
			p.recordRestart(err)
			if err == nil {
				cur = next
				p.cur.Store(cur)
				log.Info("policy plugin restarted", "pid", cur.pid, "attempt", attempt)
				break
			}
			log.Error("policy plugin restart failed", "attempt", attempt, "next_in", min(d*2, p.opts.RestartBackoffMax), "err", err)
		}
		// Drain a kick left over from the previous process.
		select {
		case <-p.kick:
		default:
		}
		tick.Reset(p.opts.HealthInterval)
	}
}

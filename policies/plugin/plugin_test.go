package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/plugins/sdk"
	"github.com/coordhost/coordhost/policies"
)

// launch starts bin with test defaults (quiet logs, fast restarts, health
// pings rare enough that tests see process exits through the supervisor's
// exit watch or failed calls) and closes it at the end of the test.
func launch(t *testing.T, bin pluginBin, mod func(*Options)) *Plugin {
	t.Helper()
	o := Options{
		Path:              bin.path,
		SHA256:            bin.sum,
		Logger:            testLogger(),
		HealthInterval:    time.Hour,
		RestartBackoff:    10 * time.Millisecond,
		RestartBackoffMax: 100 * time.Millisecond,
		// Generous: the race detector slows the host down.
		CallTimeout: 2 * time.Second,
	}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Launch(ctx, o)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

func TestHandshakeAndKinds(t *testing.T) {
	p := launch(t, examplePlugin(t), nil)
	if got, want := p.Kinds(), []policies.Kind{policies.KindPartition, policies.KindRetry}; !slices.Equal(got, want) {
		t.Fatalf("Kinds = %v, want %v", got, want)
	}
	if p.Name() != filepath.Base(examplePlugin(t).path) {
		t.Errorf("Name = %q", p.Name())
	}
	if _, err := p.Retry(); err != nil {
		t.Errorf("Retry: %v", err)
	}
	if _, err := p.Partition(); err != nil {
		t.Errorf("Partition: %v", err)
	}
	if _, err := p.Starvation(); !errors.Is(err, ErrKindNotServed) {
		t.Errorf("Starvation: err = %v, want ErrKindNotServed", err)
	}
	st := p.Stats()
	if !st.Up || st.PID <= 0 {
		t.Fatalf("Stats = %+v, want up with a pid", st)
	}
	if err := p.SelfTest(context.Background()); err != nil {
		t.Fatalf("SelfTest: %v", err)
	}
	rs, err := p.remoteStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if int(rs.GetPid()) != st.PID || rs.GetConfigureCalls() != 1 {
		t.Fatalf("plugin stats %v, want pid %d and one Configure", rs, st.PID)
	}

	all := launch(t, allKindsPlugin(t), nil)
	if got, want := all.Kinds(), []policies.Kind{policies.KindPartition, policies.KindRetry, policies.KindStarvation}; !slices.Equal(got, want) {
		t.Fatalf("Kinds = %v, want %v", got, want)
	}
	if err := all.SelfTest(context.Background()); err != nil {
		t.Fatalf("SelfTest: %v", err)
	}
}

func TestHandshakeMismatchRefused(t *testing.T) {
	// An executable that is not a plugin: it prints a handshake line of
	// another application protocol version and sleeps.
	dir := t.TempDir()
	script := filepath.Join(dir, "other-protocol")
	writeExec(t, script, "#!/bin/sh\necho '1|99|unix|/nonexistent|grpc|'\nexec sleep 30\n")
	sum, err := fileSHA256(script)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Launch(context.Background(), Options{Path: script, SHA256: sum, Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("Launch of a protocol-99 plugin: err = %v, want a version mismatch", err)
	}
}

func writeExec(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestSHA256MismatchNeverStarts(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	script := filepath.Join(dir, "plugin.sh")
	writeExec(t, script, "#!/bin/sh\ntouch '"+marker+"'\nexec sleep 30\n")
	wrong := strings.Repeat("ab", 32)
	_, err := Launch(context.Background(), Options{Path: script, SHA256: wrong, Logger: testLogger()})
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("err = %v, want ErrChecksum", err)
	}
	if !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), script) {
		t.Errorf("error %q should name the path and the configured sum", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the executable was started (marker: %v)", err)
	}

	// The real example with someone else's sum: refused the same way.
	bin := examplePlugin(t)
	_, err = Launch(context.Background(), Options{Path: bin.path, SHA256: wrong, Logger: testLogger()})
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), bin.sum) {
		t.Fatalf("err = %v, want ErrChecksum naming the actual sum %s", err, bin.sum)
	}
}

func TestInvalidOptions(t *testing.T) {
	bin := examplePlugin(t)
	for name, o := range map[string]Options{
		"no path":        {SHA256: bin.sum},
		"no sha256":      {Path: bin.path},
		"short sha256":   {Path: bin.path, SHA256: "abcd"},
		"non-hex sha256": {Path: bin.path, SHA256: strings.Repeat("zz", 32)},
		"negative call":  {Path: bin.path, SHA256: bin.sum, CallTimeout: -1},
		"backoff order":  {Path: bin.path, SHA256: bin.sum, RestartBackoff: time.Second, RestartBackoffMax: time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			o.Logger = testLogger()
			if _, err := Launch(context.Background(), o); !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestLaunchFailures(t *testing.T) {
	bin := examplePlugin(t)
	t.Run("bad config", func(t *testing.T) {
		_, err := Launch(context.Background(), Options{Path: bin.path, SHA256: bin.sum, Logger: testLogger(),
			Config: []byte(`{"retry_delay_ms": 20, "no_such_field": 1}`)})
		if err == nil || !strings.Contains(err.Error(), "configure") || !strings.Contains(err.Error(), "no_such_field") {
			t.Fatalf("err = %v, want a configure error naming the field", err)
		}
	})
	t.Run("cancelled ctx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Launch(ctx, Options{Path: bin.path, SHA256: bin.sum, Logger: testLogger()}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("ctx ends during handshake", func(t *testing.T) {
		// Never completes the handshake; the ctx deadline kills it.
		script := filepath.Join(t.TempDir(), "silent")
		writeExec(t, script, "#!/bin/sh\nexec sleep 30\n")
		sum, err := fileSHA256(script)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err = Launch(ctx, Options{Path: script, SHA256: sum, Logger: testLogger()})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestEnvNotInherited(t *testing.T) {
	t.Setenv("COORDHOST_TEST_SECRET", "hunter2")
	p := launch(t, examplePlugin(t), nil)
	rs, err := p.remoteStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Split(rs.GetInfo()["env"], ",")
	t.Logf("plugin environment (names): %v", names)
	if slices.Contains(names, "COORDHOST_TEST_SECRET") {
		t.Fatal("the plugin sees the host's COORDHOST_TEST_SECRET")
	}
	// Exactly what go-plugin's handshake needs, nothing of the host's.
	allowed := []string{sdk.MagicCookieKey, "PLUGIN_MIN_PORT", "PLUGIN_MAX_PORT", "PLUGIN_PROTOCOL_VERSIONS", "PLUGIN_UNIX_SOCKET_DIR"}
	for _, n := range names {
		if !slices.Contains(allowed, n) {
			t.Errorf("plugin sees %s, which go-plugin does not need", n)
		}
	}
	if !slices.Contains(names, sdk.MagicCookieKey) {
		t.Errorf("plugin does not see the magic cookie %s", sdk.MagicCookieKey)
	}
}

func TestDecisionsThroughPlugin(t *testing.T) {
	p := launch(t, examplePlugin(t), func(o *Options) {
		o.Config = []byte(`{"retry_delay_ms": 35, "give_up_after_ms": 1000}`)
	})
	retry, err := p.Retry()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1, Reason: policies.ReasonContended, HolderTTL: -1}),
		(policies.RetryDecision{Action: policies.WaitForWake, Delay: 35 * time.Millisecond}); got != want {
		t.Errorf("DecideRetry = %+v, want %+v", got, want)
	}
	if got := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 9, Elapsed: 2 * time.Second}); got.Action != policies.GiveUp {
		t.Errorf("DecideRetry after give_up_after = %+v, want give-up", got)
	}

	part, err := p.Partition()
	if err != nil {
		t.Fatal(err)
	}
	key, err := part.PartitionKey(context.Background(), policies.PartitionRequest{Kind: "rate_limit", Name: "checkout", Attributes: map[string]string{"tenant": "acme"}})
	if err != nil || key != "tenant:acme" {
		t.Fatalf("PartitionKey = %q, %v; want tenant:acme", key, err)
	}
	_, err = part.PartitionKey(context.Background(), policies.PartitionRequest{Kind: "rate_limit", Name: "checkout"})
	if !errors.Is(err, policies.ErrPartition) || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("PartitionKey without tenant: err = %v, want a refusal wrapping ErrPartition", err)
	}
	st := p.Stats()
	if st.Retry.Calls != 2 || st.Retry.Failures != 0 || st.Retry.Fallbacks != 0 || st.Partition.Refusals != 1 {
		t.Errorf("Stats = %+v", st)
	}

	// A starvation policy and a retry policy answering nonsense.
	all := launch(t, allKindsPlugin(t), func(o *Options) {
		o.Config = []byte(`{"bound_ms": 7, "delay_ms": 15, "invalid": true}`)
		o.FallbackRetry = policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
			return policies.RetryDecision{Action: policies.RetryAfter, Delay: 3 * time.Millisecond}
		})
	})
	starve, err := all.Starvation()
	if err != nil {
		t.Fatal(err)
	}
	if got := starve.WriterBound(context.Background(), policies.StarvationRequest{Readers: 2, Writers: 1, OldestWriterWait: time.Millisecond}); got != 7*time.Millisecond {
		t.Errorf("WriterBound = %v, want 7ms", got)
	}
	r2, _ := all.Retry()
	if got := r2.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Delay != 3*time.Millisecond {
		t.Errorf("DecideRetry with an invalid answer = %+v, want the fallback's", got)
	}
	if st := all.Stats(); st.Retry.Failures != 1 || st.Retry.Fallbacks != 1 {
		t.Errorf("Stats.Retry = %+v, want one failure and one fallback", st.Retry)
	}
}

func TestCallDeadlineFallsBack(t *testing.T) {
	p := launch(t, allKindsPlugin(t), func(o *Options) {
		o.Config = []byte(`{"sleep_ms": 2000}`)
		o.CallTimeout = 20 * time.Millisecond
		o.FallbackStarvation = policies.StarvationFunc(func(context.Context, policies.StarvationRequest) time.Duration { return 42 })
	})
	retry, _ := p.Retry()
	if got, want := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}),
		(policies.RetryDecision{Action: policies.WaitForWake, Delay: DefaultFallbackRetryDelay}); got != want {
		t.Errorf("DecideRetry past the deadline = %+v, want the default fallback %+v", got, want)
	}
	starve, _ := p.Starvation()
	if got := starve.WriterBound(context.Background(), policies.StarvationRequest{}); got != 42 {
		t.Errorf("WriterBound past the deadline = %v, want the fallback's 42", got)
	}
	part, _ := p.Partition()
	if _, err := part.PartitionKey(context.Background(), policies.PartitionRequest{Name: "x"}); !errors.Is(err, policies.ErrPartition) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("PartitionKey past the deadline: err = %v, want ErrPartition and ErrUnavailable", err)
	}
	st := p.Stats()
	for _, ks := range []KindStats{st.Retry, st.Starvation, st.Partition} {
		if ks.Calls != 1 || ks.Failures != 1 || ks.Fallbacks != 1 {
			t.Errorf("kind stats %+v, want 1 call, 1 failure, 1 fallback", ks)
		}
	}
}

func TestPartitionCache(t *testing.T) {
	p := launch(t, examplePlugin(t), nil)
	part, _ := p.Partition()
	calls := func() uint64 {
		t.Helper()
		rs, err := p.remoteStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return rs.GetPartitionKeyCalls()
	}
	req := policies.PartitionRequest{Kind: "lock", Name: "invoice", Attributes: map[string]string{"tenant": "acme", "region": "eu"}}
	for i := range 3 {
		key, err := part.PartitionKey(context.Background(), req)
		if err != nil || key != "tenant:acme" {
			t.Fatalf("call %d: %q, %v", i, key, err)
		}
	}
	if n := calls(); n != 1 {
		t.Fatalf("plugin served %d PartitionKey calls for 3 identical requests, want 1", n)
	}
	// An equal request built in another order is the same cache entry.
	same := policies.PartitionRequest{Kind: "lock", Name: "invoice", Attributes: map[string]string{"region": "eu", "tenant": "acme"}}
	if _, err := part.PartitionKey(context.Background(), same); err != nil {
		t.Fatal(err)
	}
	// Any difference reaches the plugin.
	for _, r := range []policies.PartitionRequest{
		{Kind: "lock", Name: "invoice", Attributes: map[string]string{"tenant": "acme"}},
		{Kind: "rate_limit", Name: "invoice", Attributes: map[string]string{"tenant": "acme", "region": "eu"}},
		{Kind: "lock", Name: "invoice", Attributes: map[string]string{"tenant": "acme", "region": "us"}},
	} {
		if _, err := part.PartitionKey(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	// Refusals are not cached.
	for range 2 {
		if _, err := part.PartitionKey(context.Background(), policies.PartitionRequest{Name: "x"}); err == nil {
			t.Fatal("no error without tenant")
		}
	}
	if n := calls(); n != 6 {
		t.Fatalf("plugin served %d PartitionKey calls, want 6", n)
	}
	st := p.Stats()
	if st.CacheHits != 3 || st.CacheMisses != 6 || st.CacheLen != 4 {
		t.Fatalf("cache stats hits=%d misses=%d len=%d, want 3, 6, 4", st.CacheHits, st.CacheMisses, st.CacheLen)
	}

	// Disabled cache: every call reaches the plugin.
	nc := launch(t, examplePlugin(t), func(o *Options) { o.PartitionCacheSize = -1 })
	part2, _ := nc.Partition()
	for range 3 {
		if _, err := part2.PartitionKey(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := nc.remoteStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rs.GetPartitionKeyCalls() != 3 {
		t.Fatalf("uncached: plugin served %d calls, want 3", rs.GetPartitionKeyCalls())
	}
}

package wasm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives/lock"
)

// TestLockAcquireStopsLoopingRetryModule: a lock whose retry policy is a
// module that loops on every call (with a 30 s call deadline) gives up when
// Acquire's context does, not when the module's deadline fires (the CLI's
// `lock hold -wait 1s` and SIGINT hang on this).
func TestLockAcquireStopsLoopingRetryModule(t *testing.T) {
	s := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, testdata("loop"), ModuleOptions{Name: "loop", CallTimeout: longCallTimeout})
	lk, err := lock.New(client, lock.Options{Prefix: "wasmtest:", Retry: m.Retry()})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()

	held, err := lk.TryAcquire(context.Background(), "busy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	const wait = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	l, err := lk.Acquire(ctx, "busy", time.Minute)
	el := time.Since(start)
	t.Logf("Acquire with a %v deadline returned after %v: %v", wait, el, err)
	if l != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, %v; want context.DeadlineExceeded", l, err)
	}
	if el > wait+returnsSoon {
		t.Fatalf("Acquire returned %v after starting, %v after its deadline; the retry module's call (deadline %v) was not stopped",
			el, el-wait, longCallTimeout)
	}
	if st := m.Stats(); st.Canceled < 1 || st.Failures != 0 {
		t.Errorf("module stats %+v: want the call cancelled, no failure", st)
	}
}

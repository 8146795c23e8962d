package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
)

// config keeps copies of the primitives' replication limits: they must
// agree.
func TestReplicationConfigLimitsMatch(t *testing.T) {
	if config.MaxReplicas != primitives.MaxReplicas || config.MaxReplicaTimeout != primitives.MaxReplicaTimeout {
		t.Fatalf("config %v %v, primitives %v %v", config.MaxReplicas, config.MaxReplicaTimeout, primitives.MaxReplicas, primitives.MaxReplicaTimeout)
	}
}

// replicas = 1 in a block reaches its primitive: grants are confirmed by
// the replica, and with the replica paused every kind fails with
// ErrNotReplicated after replica_timeout, holding nothing.
func TestReplicasFromConfig(t *testing.T) {
	p := redistest.Start(t, redistest.WithKind(redistest.Redis80)) // leases need hash-field expiry
	r := redistest.StartReplicaOf(t, p)
	src := fmt.Sprintf(`
redis {
  addresses = [%q]
}
lock "l" {
  ttl             = "1m"
  fencing         = true
  replicas        = 1
  replica_timeout = "200ms"
}
rwlock "rw" {
  ttl             = "1m"
  replicas        = 1
  replica_timeout = "200ms"
}
semaphore "s" {
  capacity        = 1
  ttl             = "1m"
  replicas        = 1
  replica_timeout = "200ms"
}
lease "h" {
  ttl             = "1m"
  replicas        = 1
  replica_timeout = "200ms"
}
`, p.Addr)
	path := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := h.Lock("l")
	if err != nil {
		t.Fatal(err)
	}
	rw, err := h.RWLock("rw")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := h.Semaphore("s")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := h.Lease("h")
	if err != nil {
		t.Fatal(err)
	}
	tries := map[string]func() (primitives.Lease, error){
		"lock": func() (primitives.Lease, error) { return lk.TryAcquire(ctx, nil) },
		"rwlock": func() (primitives.Lease, error) {
			return rw.TryAcquireWrite(ctx, nil)
		},
		"semaphore": func() (primitives.Lease, error) { return sem.TryAcquire(ctx, nil) },
		"lease":     func() (primitives.Lease, error) { return ls.TryAcquire(ctx, nil, "f", 0) },
	}
	for name, try := range tries {
		g, err := try()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := g.Release(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := r.MustCmd(t, "EXISTS", "coordhost:lock:l"); n != "0" {
		t.Fatal("the released lock is still on the replica")
	}

	r.Pause()
	defer r.Resume()
	for name, try := range tries {
		start := time.Now()
		g, err := try()
		if err == nil {
			g.Release(ctx)
		}
		if !errors.Is(err, primitives.ErrNotReplicated) || time.Since(start) < 200*time.Millisecond {
			t.Fatalf("%s with the replica paused: %v after %v", name, err, time.Since(start))
		}
	}
	if n := p.MustCmd(t, "DBSIZE"); n != "1" { // the lock's fencing counter alone
		t.Fatalf("DBSIZE %s after unconfirmed grants: %s", n, p.MustCmd(t, "KEYS", "*"))
	}
}

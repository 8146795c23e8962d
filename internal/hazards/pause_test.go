package hazards_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

// The child process of TestHazardClientPause reads these.
const (
	childRedisEnv = "COORDHOST_HAZARD_CHILD_REDIS"
	childStoreEnv = "COORDHOST_HAZARD_CHILD_STORE"
)

// pauseTTL is the lock's lease in the pause test; the pause lasts longer.
const pauseTTL = time.Second

// A client process stopped for longer than its lock's TTL (SIGSTOP here;
// a long GC pause, a swapped-out or frozen VM, a debugger behave alike):
// the child process holds a fenced lock for 1 s, checks Done (open),
// says it is about to write to the protected resource, and is stopped
// right there for 1.5 s. The lock expires; the parent takes it (token 2)
// and writes. When the child resumes, its write with token 1 reaches the
// resource, which refuses it; only afterwards does the child find Done
// closed (its timer fired late, after the resume) and Verify false. Done
// cannot stop a write that passed its check before the pause: the fencing
// token does.
func TestHazardClientPause(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	store := &fencedStore{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := strconv.ParseInt(r.FormValue("token"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := store.Write(token, r.FormValue("what")); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()

	child := exec.Command(os.Args[0], "-test.run=^TestHazardClientPauseChild$", "-test.count=1", "-test.v")
	child.Env = append(os.Environ(), childRedisEnv+"="+s.Addr, childStoreEnv+"="+srv.URL)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The child waits for a line on stdin before it writes: the parent
	// sends it once the child is stopped, so the write comes after the
	// pause however slowly either process runs.
	in, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(prefix string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the child ended before saying %q", prefix)
				}
				if rest, found := strings.CutPrefix(l, prefix); found {
					return strings.TrimSpace(rest)
				}
			case <-ctx.Done():
				t.Fatalf("no %q from the child", prefix)
			}
		}
	}

	next("HAZARD about to write")
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// kill(SIGSTOP) returns before the stop: the kernel wakes one thread
	// to begin the group stop, and on a busy machine another can meanwhile
	// return from its read and run on (CI saw the child read the line
	// below and send its write before it stopped).
	xtest.Eventually(t, 10*time.Second, "every thread of the child stopped", func() bool {
		return redistest.ProcessStopped(child.Process.Pid)
	})
	if _, err := io.WriteString(in, "go on\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pauseTTL + pauseTTL/2)

	l, err := lock.New(s.Client(t), lock.Options{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mine, err := l.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("the lock of the stopped child did not expire: %v", err)
	}
	defer mine.Release(ctx)
	if err := store.Write(mine.FencingToken(), "parent"); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumedNs := resumed.UnixNano()
	status := next("HAZARD write")
	report := next("HAZARD after")
	doneLag := "?"
	if i := strings.Index(report, "done-at-ns="); i >= 0 {
		if ns, err := strconv.ParseInt(report[i+len("done-at-ns="):], 10, 64); err == nil && ns > 0 {
			doneLag = time.Duration(ns - resumedNs).Round(time.Millisecond).String()
		}
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("the child failed: %v", err)
	}
	t.Logf("the child was stopped %v (its lock's TTL %v); the parent holds token %d; the child's write with its old token after resuming: %s; then: %s; its Done closed %s after the resume",
		resumed.Sub(stopped).Round(time.Millisecond), pauseTTL, mine.FencingToken(), status, report, doneLag)
	if !strings.HasPrefix(status, "409") {
		t.Errorf("the stale write was not refused: %s", status)
	}
	if !strings.Contains(report, "done-before-write=false") || !strings.Contains(report, "done-after=true") || !strings.Contains(report, "verify=false") {
		t.Errorf("the child's handle: %s", report)
	}
	if len(store.refused) != 1 || len(store.writes) != 2 {
		t.Errorf("the resource accepted %q and refused %q", store.writes, store.refused)
	}
}

// TestHazardClientPauseChild is the child process of
// TestHazardClientPause; run directly, it does nothing.
func TestHazardClientPauseChild(t *testing.T) {
	addr, storeURL := os.Getenv(childRedisEnv), os.Getenv(childStoreEnv)
	if addr == "" {
		return
	}
	ctx := xtest.Ctx(t, 30*time.Second)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := lock.New(c, lock.Options{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := l.TryAcquire(ctx, "job", pauseTTL)
	if err != nil {
		t.Fatal(err)
	}
	doneAt := make(chan int64, 1) // wall-clock ns: comparable with the parent's
	go func() { <-a.Done(); doneAt <- time.Now().UnixNano() }()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	write := func(what string) string {
		resp, err := hc.PostForm(storeURL, map[string][]string{"token": {strconv.FormatInt(a.FencingToken(), 10)}, "what": {what}})
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if got := write("child, first"); !strings.HasPrefix(got, "200") {
		t.Fatalf("first write: %s", got)
	}
	// The protected work: check that the lock is still ours, then write.
	doneBefore := closed(a.Done())
	fmt.Println("HAZARD about to write")
	// The parent stops the process in here, then says go on.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("waiting for the parent: %v", err)
	}
	status := write("child, after the pause")
	fmt.Println("HAZARD write", status)
	// Done's timer fires once the runtime runs again: wait for it briefly.
	doneAfter, closedAt := false, int64(0)
	select {
	case closedAt = <-doneAt:
		doneAfter = true
	case <-time.After(time.Second):
	}
	ok, err := a.Verify(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	fmt.Printf("HAZARD after done-before-write=%v done-after=%v remaining=%v verify=%v done-at-ns=%d\n", doneBefore, doneAfter, a.Remaining(), ok, closedAt)
}

// Package xtest holds the helpers every test package shares: one TestMain
// (goroutine-leak check, optional example server and cleanup), a bounded
// context, Eventually, and a SyncBuffer for output written concurrently. Tests only; production code never imports it.
package xtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"go.uber.org/goleak"
)

// Option configures Main.
type Option func(*mainConfig)

type mainConfig struct {
	major  int
	addr   *string
	before []func() error
	after  []func()
	ignore []goleak.Option
}

// ExampleServer starts a standalone server of the given major version (as
// redistest.Version) for runnable examples, which cannot take a
// testing.TB, and stores its address in *addr before the tests run. It
// stops after them, before the leak check.
func ExampleServer(major int, addr *string) Option {
	return func(c *mainConfig) { c.major, c.addr = major, addr }
}

// Before runs f before the tests; an error fails the run.
func Before(f func() error) Option {
	return func(c *mainConfig) { c.before = append(c.before, f) }
}

// After runs f after the tests, before the leak check.
func After(f func()) Option {
	return func(c *mainConfig) { c.after = append(c.after, f) }
}

// Ignore adds goleak options (e.g. goleak.IgnoreAnyFunction).
func Ignore(opts ...goleak.Option) Option {
	return func(c *mainConfig) { c.ignore = append(c.ignore, opts...) }
}

// Main is TestMain for a package whose tests start goroutines: it runs the
// tests and, when they passed, fails the run if a goroutine is left behind,
// ignoring the bounded ones rueidis leaves after Client.Close
// (redistest.LingeringGoroutines). It exits.
func Main(m *testing.M, opts ...Option) {
	var c mainConfig
	for _, o := range opts {
		o(&c)
	}
	goleakOpts := append([]goleak.Option(nil), c.ignore...)
	for _, f := range redistest.LingeringGoroutines() {
		goleakOpts = append(goleakOpts, goleak.IgnoreAnyFunction(f))
	}
	goleak.VerifyTestMain(run{m: m, c: c}, goleakOpts...)
}

type run struct {
	m *testing.M
	c mainConfig
}

func (r run) Run() int {
	defer func() {
		for i := len(r.c.after) - 1; i >= 0; i-- {
			r.c.after[i]()
		}
	}()
	for _, f := range r.c.before {
		if err := f(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if r.c.addr != nil {
		addr, stop, err := redistest.StartForExamples(r.c.major)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
		*r.c.addr = addr
	}
	return r.m.Run()
}

// Ctx returns a context that ends after d or when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 10ms until it holds, and fails the test with
// what if d passes first.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package main

import (
	"context"
	"sync"
	"time"
)

// handoffTTL is the lease in the handoff chain; never reached.
const handoffTTL = 10 * time.Second

// chainConfig is one handoff run: waiters+1 goroutines of one process share
// one implementation instance (one client) and pass one key around.
type chainConfig struct {
	key     string
	waiters int
	warm    int           // handoffs discarded before measuring
	n       int           // handoffs measured
	hold    time.Duration // how long each new holder keeps the lock
	limit   time.Duration // wall-clock bound on the whole run
	// atStart and atEnd run while the lock is held, right after handoff
	// number warm and warm+n were recorded, before anything is released:
	// the window between them holds exactly n complete handoff cycles.
	atStart, atEnd func()
}

type chainResult struct {
	lats     []time.Duration // n values unless timedOut
	errs     int
	firstErr error
	timedOut bool
	elapsed  time.Duration // the measured window
}

// runChain measures handoff latency. Every goroutine loops: Lock (waiting),
// record the time, hold, note the time just before Release, Release, wait
// until another goroutine got the lock, then queue up again. So while a
// lock is held, the other `waiters` goroutines are all waiting in Lock (the
// previous holder re-joins during the hold). The latency of a handoff is
// from just before Release was called to the moment the next Lock returned.
func runChain(im impl, cfg chainConfig) chainResult {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.limit)
	defer cancel()

	var (
		mu       sync.Mutex
		handed   = make(chan struct{}) // closed at the next successful Lock
		lastRel  time.Time             // zero before the first release
		count    int                   // handoffs seen
		finished bool
		res      chainResult
		winStart time.Time
	)
	res.lats = make([]time.Duration, 0, cfg.n)

	var wg sync.WaitGroup
	for range cfg.waiters + 1 {
		wg.Go(func() {
			for ctx.Err() == nil {
				h, err := im.Lock(ctx, cfg.key, handoffTTL)
				got := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						res.errs++
						if res.firstErr == nil {
							res.firstErr = err
						}
						mu.Unlock()
						time.Sleep(time.Millisecond)
					}
					continue
				}
				mu.Lock()
				if finished {
					mu.Unlock()
					_ = h.Release(context.Background())
					return
				}
				if !lastRel.IsZero() {
					count++
					if count > cfg.warm {
						res.lats = append(res.lats, got.Sub(lastRel))
					}
					if count == cfg.warm {
						winStart = time.Now()
						if cfg.atStart != nil {
							cfg.atStart()
						}
					}
					if count == cfg.warm+cfg.n {
						if cfg.atEnd != nil {
							cfg.atEnd()
						}
						res.elapsed = time.Since(winStart)
						finished = true
						mu.Unlock()
						cancel()
						_ = h.Release(context.Background())
						return
					}
				}
				close(handed)
				handed = make(chan struct{})
				mine := handed
				mu.Unlock()

				time.Sleep(cfg.hold)
				mu.Lock()
				lastRel = time.Now()
				mu.Unlock()
				if err := h.Release(context.WithoutCancel(ctx)); err != nil {
					mu.Lock()
					res.errs++
					if res.firstErr == nil {
						res.firstErr = err
					}
					mu.Unlock()
				}
				select {
				case <-mine:
				case <-ctx.Done():
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	res.timedOut = !finished
	return res
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// signalError is the cancellation cause when a signal interrupted
// coordhost before CMD was started.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return fmt.Sprintf("interrupted by %s", signalName(e.sig)) }

// relaySignalsToCancel cancels with a signalError on the first signal from
// sigs. The returned stop function ends the relay and waits for it; signals
// that arrive later stay in sigs.
func relaySignalsToCancel(sigs <-chan os.Signal, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case sig := <-sigs:
			ss, ok := sig.(syscall.Signal)
			if !ok {
				ss = syscall.SIGTERM
			}
			cancel(signalError{ss})
		case <-done:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// signalCause reports whether ctx was cancelled by a signal, and which.
func signalCause(ctx context.Context) (syscall.Signal, bool) {
	var se signalError
	if errors.As(context.Cause(ctx), &se) {
		return se.sig, true
	}
	return 0, false
}

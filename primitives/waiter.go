package primitives

import (
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// Waiter puts the waiting callers of every primitive on one client to
// sleep until the server says what they want may have changed, and wakes
// them at the holder's expiry even when it says nothing. It keeps one
// dedicated connection for all of them (CLIENT SETNAME coordhost-wait),
// dialled when the first caller waits, and per key lets only the oldest
// local waiter re-attempt after a wake, so a release costs a few commands
// per process whatever the number of local waiters.
//
// Give one Waiter to every primitive on a client (their Options.Waiter) so
// that a process holds one waiting connection per client; a primitive
// given none makes a private one and closes it with itself. Safe for
// concurrent use. Close it after the primitives that use it.
//
// Which client options give which wake-up source (WaitAuto):
//   - Standalone or sentinel client speaking RESP3 (rueidis' default, with
//     or without DisableCache): client tracking on the dedicated
//     connection. Releases, deletions and overwrites wake waiters at once.
//   - Cluster client, or AlwaysRESP2: the key's release channel (one
//     SUBSCRIBE per waited-on key on the dedicated connection). A key
//     deleted without a coordhost release wakes waiters only at the
//     holder's expiry or the retry policy's bound.
//   - Pub/sub refused by ACL: a poll every PollInterval at most.
//
// In every mode a waiter also wakes at the holder's remaining TTL, since
// Redis may report an expiry tens of seconds late.
type Waiter wait.Engine

// WaitMode selects where a Waiter's wake-ups come from.
type WaitMode int

const (
	// WaitAuto uses client tracking on standalone RESP3 clients, the
	// release channel on cluster or RESP2 clients, and polling when
	// pub/sub is refused.
	WaitAuto WaitMode = iota
	// WaitChannel uses the release channel even where tracking works.
	WaitChannel
	// WaitPoll uses neither; waiters re-attempt at least every
	// PollInterval.
	WaitPoll
)

// DefaultPollInterval, 100ms, bounds a waiter's sleep when nothing announces
// changes (WaitPoll, or while the waiting connection is being dialled).
const DefaultPollInterval = wait.DefaultPollInterval

// MinPollInterval is the shortest PollInterval a Waiter accepts.
const MinPollInterval = 10 * time.Millisecond

// WaiterOptions configure a Waiter. The zero value picks the wake-up
// source automatically and polls at most every DefaultPollInterval.
type WaiterOptions struct {
	// Mode forces a wake-up source (tests, diagnostics).
	Mode WaitMode
	// PollInterval bounds every sleep while nothing can announce changes;
	// 0 means DefaultPollInterval; at least MinPollInterval.
	PollInterval time.Duration
}

// NewWaiter returns a Waiter for client. It dials nothing until a caller
// waits and never closes the client. Errors wrap ErrInvalidOptions.
func NewWaiter(client rueidis.Client, opts WaiterOptions) (*Waiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: waiter: nil rueidis client", ErrInvalidOptions)
	}
	mode, ok := map[WaitMode]wait.Mode{WaitAuto: wait.ModeAuto, WaitChannel: wait.ModeChannel, WaitPoll: wait.ModePoll}[opts.Mode]
	if !ok {
		return nil, fmt.Errorf("%w: waiter: unknown Mode %d", ErrInvalidOptions, opts.Mode)
	}
	if opts.PollInterval != 0 && opts.PollInterval < MinPollInterval {
		return nil, fmt.Errorf("%w: waiter: PollInterval %v is below %v (each waiter attempts once per interval)", ErrInvalidOptions, opts.PollInterval, MinPollInterval)
	}
	return (*Waiter)(wait.New(client, wait.Options{Mode: mode, PollInterval: opts.PollInterval})), nil
}

// Close wakes every caller still waiting (their calls fail with an error
// matching ErrClosed) and closes the waiting connection. Primitives that
// use the Waiter keep their granted leases but can no longer wait.
// Idempotent.
func (w *Waiter) Close() error {
	if w == nil {
		return nil
	}
	return (*wait.Engine)(w).Close()
}

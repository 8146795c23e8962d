// Package wasm runs coordhost policies compiled to WebAssembly, on wazero.
//
// A Runtime compiles modules (once, with an optional on-disk compilation
// cache) and Load turns one into a Module: a pool of at most GOMAXPROCS
// instances, created lazily, each configured once, discarded after any
// trap, deadline or bad result. A Module serves the policy kinds the binary
// implements through Retry, Starvation and Partition; when the module fails
// (or its circuit breaker is open) retry and starvation answers come from a
// fallback policy and partition fails closed with an error wrapping
// policies.ErrPartition.
//
// # The coordpol v1 ABI
//
// plugins/sdk/guest/README.md is the reference for module authors; this is
// the host's summary.
//
// Every module exports
//
//	memory                            its own linear memory (imported memory is refused)
//	policy_abi_version() i32          must return 1
//	policy_io_ptr() i32               offset of the I/O area in memory
//	policy_io_cap() i32               size of the I/O area in bytes
//	policy_configure(len i32) i32     0 = ok
//
// and one or more of the kind exports, which Load detects by name and
// checks by signature before anything is instantiated:
//
//	retry_decide(attempt i32, reason i32, elapsed_ms i64, hint_ms i64, rand i64) i64
//	starvation_bound(readers i32, writers i32, oldest_writer_wait_ms i64) i64
//	partition_key(in_len i32) i32
//
// policy_configure is called once per new instance after the host wrote the
// config bytes (the JSON of the HCL `config` object; none when there is no
// config) at the start of the I/O area. A non-zero result fails the
// instance; a negative result r additionally means the I/O area starts with
// a (-r-1)-byte UTF-8 error message.
//
// retry_decide inputs: attempt counts failed attempts (from 1, capped at
// 2^31-1); reason is policies.RetryReason (1 contended, 2 error);
// elapsed_ms is RetryRequest.Elapsed rounded down; hint_ms is
// RetryRequest.HolderTTL rounded up, or -1 when unknown; rand is
// RetryRequest.Rand's 64 bits. The i64 result encodes the decision:
//
//	r >= 0   policies.WaitForWake with Delay = r ms (0: no bound of its own)
//	r == -1  policies.GiveUp
//	r <= -2  policies.RetryAfter with Delay = (-r-2) ms
//
// A delay above MaxDelayMS (the largest time.Duration in ms) is a bad
// result.
//
// starvation_bound inputs are StarvationRequest's fields (the wait rounded
// down to ms); the result is the bound in ms, and a negative result (or one
// above MaxDelayMS) means policies.Unbounded.
//
// partition_key: the host writes the request at the start of the I/O area
// and passes its length. Every field is a u32 little-endian byte length
// followed by the bytes: the kind, the name, then the attribute count (a
// bare u32) and that many key, value pairs, sorted by key. The module
// writes the key at the start of the I/O area and returns its length
// (1..io_cap). A negative result r is the policy's own refusal, with a
// (-r-1)-byte message at the start of the I/O area; the acquisition fails
// closed with that message, but the module is not considered broken. An
// empty key is refused the same way. A result above io_cap is a bad result.
//
// Scalars cross the boundary on the hot path; the only bytes are the
// partition request and key.
//
// # Imports
//
// A module may import only functions, from two modules:
//
//   - policy_host: log(ptr i32, len i32) writes len bytes (truncated to 1
//     KiB) at ptr to the module's slog.Logger at level Info. Each instance
//     may log 100 lines a second; the excess is dropped and counted.
//   - wasi_snapshot_preview1, which the Go wasip1 port needs. It is empty:
//     no arguments, no environment, no files, no sockets; wazero's default
//     fake clocks (they advance 1 ms per reading, sleeping returns at once)
//     and deterministic random source. Standard output and error go to the
//     logger, line by line (stderr at Warn, so a Go panic is visible).
//
// Anything else (another module, an unknown name, a different signature,
// an imported memory, table or global) is refused by Load with an error
// wrapping ErrImport that names the import. A WASI command (exporting
// _start) is refused too: build Go policies with -buildmode=c-shared; their
// _initialize export runs once per instance.
//
// # Checking a module without running it
//
// Check (and Runtime.Check) runs everything Load does before it
// instantiates a module, in the same code: the options, the binary's
// imports and memory, compilation, the exports and their signatures.
// Where the module's code makes them constants (`i32.const N`, or
// `global.get` of an immutable global initialised with one), it also
// checks the values Load gets by calling the exports: policy_abi_version
// must return 1, the I/O area must lie in the initial memory (unless a
// start function or _initialize runs first) and the config must fit it.
// CheckResult.Unchecked lists what only running the module can tell (a Go
// module's ABI version, policy_configure's verdict). `coordhost validate`
// runs it through the host.
//
// # Deadlines and cancellation
//
// Every call has a deadline of ModuleOptions.CallTimeout (default 50 ms),
// enforced by wazero's WithCloseOnContextDone: the call ends with an error
// and the instance is discarded. Each instance keeps one cancellable
// context and one timer, re-armed per call, so the deadline allocates
// nothing of its own; but a runtime with WithCloseOnContextDone starts a
// watchdog goroutine for every call (about 1 µs and 3 allocations) and
// adds termination checks to the compiled code.
//
// The caller's context stops a call too: when it can end (its Done channel
// is not nil), the call links it to the instance's context with
// context.AfterFunc (an allocation or two), so a cancelled acquisition
// stops a running call at once; a context that cannot end
// (context.Background) costs nothing. A context that ended before the call
// (or while it waited for an instance) skips the module. Either way the
// outcome is OutcomeCanceled: retry and starvation answer from their
// fallback (which the caller ignores), partition fails with an error
// wrapping policies.ErrPartition and the context's error; the circuit
// breaker does not count it.
//
// A module loaded with CallTimeout = NoCallTimeout runs on a second wazero
// runtime without termination checks: a call allocates nothing and costs
// about 150–200 ns, but a call that never returns cannot be stopped, by
// its deadline (there is none) or by its caller. Such a module checks the
// caller's context only before a call: a call that has started runs to
// its end. Use it only for trusted, tested modules that answer in
// nanoseconds; configuration files cannot select it.
//
// # Memory
//
// An instance's memory is capped at ModuleOptions.MemoryPages
// (default DefaultMemoryLimitPages, 512 pages of 64 KiB = 32 MiB, whatever
// the Runtime's own limit): Load rewrites the module's memory maximum, so
// memory.grow beyond it returns -1. A memory.grow is one Go allocation and
// copy that a deadline cannot interrupt, which the cap bounds (a few
// milliseconds at 32 MiB); once a call's deadline has fired or its caller
// has gone, every further memory.grow of that instance fails at once, so a
// module growing in a loop stops allocating before its next termination
// check ends it.
//
// # Untrusted text
//
// Everything a module says is escaped before it reaches an error or a log
// (policies.EscapeText, policies.QuoteText): refusal and configure
// messages are quoted in errors, policy_host.log lines and standard output
// and error lines are escaped log messages, and wazero's trap errors (which
// carry the module's own function names) are escaped; all are cut at
// policies.MaxTextLen bytes.
package wasm

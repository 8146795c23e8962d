// Package guest helps write coordhost WebAssembly policies in Go: it owns
// the I/O area of the coordpol v1 ABI, encodes retry decisions and error
// results, decodes partition requests and writes partition keys.
//
// A policy is a small main package built as a WASI reactor with Go 1.24 or
// later:
//
//	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 go build -buildmode=c-shared \
//	    -trimpath -ldflags=-buildid= -o policy.wasm .
//
// Because //go:wasmexport functions must live in package main, this package
// exports nothing by itself; the policy's main wires the ABI exports to it:
//
//	//go:wasmexport policy_abi_version
//	func abiVersion() int32 { return guest.ABIVersion }
//
//	//go:wasmexport policy_io_ptr
//	func ioPtr() uint32 { return guest.IOPtr() }
//
//	//go:wasmexport policy_io_cap
//	func ioCap() uint32 { return guest.IOCap }
//
//	//go:wasmexport policy_configure
//	func configure(n int32) int32 {
//		cfg, err := guest.LoadConfig(n)
//		if err != nil {
//			return guest.Error(err.Error())
//		}
//		delay, err = cfg.Int("delay_ms", 25)
//		...
//		return 0
//	}
//
//	//go:wasmexport retry_decide
//	func retryDecide(attempt, reason int32, elapsedMS, hintMS, rnd int64) int64 {
//		return guest.WaitForWake(delay)
//	}
//
//	func main() {}
//
// # The coordpol v1 ABI
//
// README.md in this package's directory is the complete reference for
// module authors in any language (encodings, limits, failures, fallbacks,
// the load-time self-test); what follows is a summary.
//
// Exports every module has:
//
//	memory                            the module's own linear memory
//	policy_abi_version() i32          must return 1 (ABIVersion)
//	policy_io_ptr() i32               offset of the I/O area in memory
//	policy_io_cap() i32               its size in bytes
//	policy_configure(len i32) i32     0 = ok; called once per instance, after
//	                                  the host wrote len bytes of config (the
//	                                  JSON of the HCL `config` object, or
//	                                  nothing) into the I/O area
//
// Exports per kind (a module implements one or more kinds; the host detects
// them by name and checks their signatures before instantiating):
//
//	retry_decide(attempt i32, reason i32, elapsed_ms i64, hint_ms i64, rand i64) i64
//	starvation_bound(readers i32, writers i32, oldest_writer_wait_ms i64) i64
//	partition_key(in_len i32) i32
//
// Inputs of retry_decide: attempt counts failed attempts (from 1, capped at
// 2^31-1); reason is ReasonContended or ReasonError; elapsed_ms is the time
// since the first attempt, rounded down; hint_ms is the holder's remaining
// TTL rounded up, or -1 when unknown; rand is 64 random bits from the host.
// Its result is encoded as documented on EncodeRetry.
//
// starvation_bound returns the writer bound in milliseconds; a negative
// result means unbounded (reader preference), 0 strict writer preference.
//
// partition_key reads in_len bytes from the I/O area (see DecodePartition),
// writes the key at the start of the I/O area and returns its length; a
// negative result is an error (see ErrorResult) and the host fails the
// acquisition closed.
//
// Imports: only policy_host.log(ptr i32, len i32) (see Log) and the
// functions of wasi_snapshot_preview1 (which the Go runtime needs). WASI is
// empty: no arguments, no environment, no files, fake clocks and a
// deterministic random source. Policies are pure: time and randomness come
// in as arguments.
package guest

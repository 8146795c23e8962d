// Command gostarve is an example coordhost starvation policy in Go,
// compiled to WebAssembly (see scripts/build-wasm.sh). Readers of a
// read-write lease are held off once the oldest waiting writer has waited
// bound_ms; when more than crowd writers wait, at once (strict writer
// preference), so a queue of writers drains before more readers pile on.
//
// Config (HCL `config` object, all optional):
//
//	config = { bound_ms = 200, crowd = 4 }
//
// bound_ms < 0 means never hold readers off for a small queue (reader
// preference); crowd 0 means the queue size never matters.
package main

import (
	"errors"

	"github.com/coordhost/coordhost/plugins/sdk/guest"
)

type settings struct {
	BoundMS int64
	Crowd   int64
}

var cfg = settings{BoundMS: 200, Crowd: 4}

//go:wasmexport policy_abi_version
func abiVersion() int32 { return guest.ABIVersion }

//go:wasmexport policy_io_ptr
func ioPtr() uint32 { return guest.IOPtr() }

//go:wasmexport policy_io_cap
func ioCap() uint32 { return guest.IOCap }

//go:wasmexport policy_configure
func configure(n int32) int32 {
	s, err := parse(guest.Input(n))
	if err != nil {
		return guest.Error("gostarve: " + err.Error())
	}
	cfg = s
	return 0
}

// parse decodes and checks the config (tested natively).
func parse(b []byte) (settings, error) {
	var s settings
	c, err := guest.ParseConfig(b)
	if err == nil {
		s.BoundMS, err = c.Int("bound_ms", 200)
	}
	if err == nil {
		s.Crowd, err = c.Int("crowd", 4)
	}
	if err == nil && s.Crowd < 0 {
		err = errors.New("crowd must not be negative")
	}
	return s, err
}

//go:wasmexport starvation_bound
func starvationBound(readers, writers int32, oldestWriterWaitMS int64) int64 {
	return bound(cfg, writers)
}

// bound is starvation_bound's result for s with writers waiting.
func bound(s settings, writers int32) int64 {
	if s.Crowd > 0 && int64(writers) > s.Crowd {
		return 0
	}
	if s.BoundMS < 0 {
		return guest.Unbounded
	}
	return s.BoundMS
}

func main() {}

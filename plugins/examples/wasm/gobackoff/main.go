// Command gobackoff is an example coordhost retry policy in Go, compiled to
// WebAssembly (see scripts/build-wasm.sh):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o gobackoff.wasm .
//
// After failed attempt n it picks a delay uniformly in [base, upper] with
// upper = min(max, base·3^(n-1)), a stateless variant of "decorrelated
// jitter". A contended attempt waits for a wake-up bounded by that delay;
// an attempt that failed with an error sleeps the delay (an error brings no
// wake-up). Once give_up_after_ms have elapsed it gives up.
//
// Config (HCL `config` object, all optional):
//
//	config = { base_ms = 10, max_ms = 1000, give_up_after_ms = 0 }
package main

import (
	"errors"

	"github.com/coordhost/coordhost/plugins/sdk/guest"
)

// settings is the decoded config; the zero value of each field means its
// default.
type settings struct {
	BaseMS        int64 `json:"base_ms"`
	MaxMS         int64 `json:"max_ms"`
	GiveUpAfterMS int64 `json:"give_up_after_ms"`
}

var cfg = settings{BaseMS: 10, MaxMS: 1000}

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
		return guest.Error("gobackoff: " + err.Error())
	}
	cfg = s
	return 0
}

// parse decodes and checks the config (tested natively).
func parse(b []byte) (settings, error) {
	var s settings
	c, err := guest.ParseConfig(b)
	if err == nil {
		s.BaseMS, err = c.Int("base_ms", 10)
	}
	if err == nil {
		s.MaxMS, err = c.Int("max_ms", 1000)
	}
	if err == nil {
		s.GiveUpAfterMS, err = c.Int("give_up_after_ms", 0)
	}
	switch {
	case err != nil:
		return s, err
	case s.BaseMS <= 0:
		return s, errors.New("base_ms must be positive")
	case s.MaxMS < s.BaseMS:
		return s, errors.New("max_ms must be at least base_ms")
	case s.GiveUpAfterMS < 0:
		return s, errors.New("give_up_after_ms must not be negative")
	}
	return s, nil
}

//go:wasmexport retry_decide
func retryDecide(attempt, reason int32, elapsedMS, hintMS, rnd int64) int64 {
	return decide(cfg, attempt, reason, elapsedMS, uint64(rnd))
}

// decide is the policy itself, a pure function (tested natively).
func decide(s settings, attempt, reason int32, elapsedMS int64, rnd uint64) int64 {
	if s.GiveUpAfterMS > 0 && elapsedMS >= s.GiveUpAfterMS {
		return guest.GiveUp()
	}
	upper := s.BaseMS
	for i := int32(1); i < attempt && upper < s.MaxMS; i++ {
		upper *= 3
	}
	upper = min(upper, s.MaxMS)
	d := s.BaseMS + int64(rnd%uint64(upper-s.BaseMS+1))
	if s.GiveUpAfterMS > 0 {
		d = max(min(d, s.GiveUpAfterMS-elapsedMS), 1)
	}
	if reason == guest.ReasonError {
		return guest.RetryAfter(d)
	}
	return guest.WaitForWake(d)
}

func main() {}

// Command gotenant is an example coordhost partition policy in Go, compiled
// to WebAssembly (see scripts/build-wasm.sh). It puts each tenant in its
// own partition: the key is the prefix followed by the caller's attribute
// named by attr, e.g. "tenant:acme". A missing or empty attribute is an
// error, so the acquisition fails closed.
//
// Config (HCL `config` object, all optional):
//
//	config = { attr = "tenant", prefix = "tenant:" }
package main

import (
	"errors"

	"github.com/coordhost/coordhost/plugins/sdk/guest"
)

type settings struct {
	Attr, Prefix string
}

var cfg = settings{Attr: "tenant", Prefix: "tenant:"}

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
		return guest.Error("gotenant: " + err.Error())
	}
	cfg = s
	guest.Log("gotenant: partitioning by attribute " + s.Attr)
	return 0
}

// parse decodes and checks the config (tested natively).
func parse(b []byte) (settings, error) {
	var s settings
	c, err := guest.ParseConfig(b)
	if err == nil {
		s.Attr, err = c.String("attr", "tenant")
	}
	if err == nil {
		s.Prefix, err = c.String("prefix", "tenant:")
	}
	if err == nil && s.Attr == "" {
		err = errors.New("attr must not be empty")
	}
	return s, err
}

//go:wasmexport partition_key
func partitionKey(n int32) int32 {
	req, err := guest.ViewPartition(n)
	if err != nil {
		return guest.Error(err.Error())
	}
	return build(cfg, &req)
}

// build writes the key, or an error, and returns partition_key's result.
// It allocates nothing on success: the request is read in place and the
// key assembled in the SDK's scratch buffer.
func build(s settings, r *guest.PartitionView) int32 {
	v, _ := r.Attr(s.Attr)
	if len(v) == 0 {
		return guest.Error("gotenant: " + string(r.Kind()) + " " + string(r.Name()) + ": missing attribute " + s.Attr)
	}
	var k guest.KeyBuilder
	k.WriteString(s.Prefix)
	k.Write(v)
	return k.Output()
}

func main() {}

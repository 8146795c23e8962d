// Command coordhost-example-plugin is an example out-of-process coordhost
// policy plugin (hashicorp/go-plugin over gRPC). It serves two kinds:
//
//   - partition: the key is "tenant:" + the request's "tenant" attribute; a
//     request without one is refused (the acquisition fails closed).
//   - retry: wait for a wake-up bounded by a constant delay (20ms unless
//     configured), giving up after give_up_after_ms if set.
//
// Build it with (the Makefile's plugin target):
//
//	go build -o bin/coordhost-example-plugin ./plugins/examples/plugin
//
// and declare it with driver = "plugin", the binary's path and its sha256.
// Configuration (all optional), as the policy block's `config`:
//
//	{"retry_delay_ms": 20, "give_up_after_ms": 0, "tenant_prefix": "tenant:"}
//
// It is not meant to be run by hand: started without coordhost's handshake
// it prints a note and exits 1.
//
// For the host's tests, Stats reports the names (never the values) of the
// environment variables the process sees, under the info key "env".
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/plugins/sdk"
)

// config is the JSON configuration.
type config struct {
	RetryDelayMS  int64  `json:"retry_delay_ms"`
	GiveUpAfterMS int64  `json:"give_up_after_ms"`
	TenantPrefix  string `json:"tenant_prefix"`
}

// examplePolicy serves the partition and retry kinds. Configure swaps the
// whole configuration atomically, so decisions never see half of it.
type examplePolicy struct {
	cfg atomic.Pointer[config]
}

func newPolicy() *examplePolicy {
	p := &examplePolicy{}
	p.cfg.Store(&config{RetryDelayMS: 20, TenantPrefix: "tenant:"})
	return p
}

// Configure implements sdk.Configurable.
func (p *examplePolicy) Configure(raw []byte) error {
	c := config{RetryDelayMS: 20, TenantPrefix: "tenant:"}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return fmt.Errorf("example plugin config: %w", err)
		}
	}
	if c.RetryDelayMS < 0 || c.GiveUpAfterMS < 0 {
		return errors.New("example plugin config: durations must not be negative")
	}
	p.cfg.Store(&c)
	return nil
}

// PartitionKey implements sdk.PartitionPolicy.
func (p *examplePolicy) PartitionKey(_ context.Context, r sdk.PartitionRequest) (string, error) {
	t, ok := r.Attributes["tenant"]
	if !ok || t == "" {
		return "", fmt.Errorf("%s %q: missing attribute \"tenant\"", r.Kind, r.Name)
	}
	return p.cfg.Load().TenantPrefix + t, nil
}

// DecideRetry implements sdk.RetryPolicy.
func (p *examplePolicy) DecideRetry(_ context.Context, r sdk.RetryRequest) sdk.RetryDecision {
	c := p.cfg.Load()
	if giveUp := time.Duration(c.GiveUpAfterMS) * time.Millisecond; giveUp > 0 && r.Elapsed >= giveUp {
		return sdk.RetryDecision{Action: sdk.GiveUp}
	}
	return sdk.RetryDecision{Action: sdk.WaitForWake, Delay: time.Duration(c.RetryDelayMS) * time.Millisecond}
}

// Info implements sdk.InfoReporter: the names of the environment variables
// this process sees, sorted and comma-separated.
func (p *examplePolicy) Info() map[string]string {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	slices.Sort(names)
	return map[string]string{"env": strings.Join(names, ",")}
}

func main() {
	sdk.Serve(newPolicy())
}

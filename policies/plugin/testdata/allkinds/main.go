// Command allkinds is a test plugin serving all three policy kinds, with
// knobs for the host's tests (as JSON config):
//
//	{"bound_ms": 5, "delay_ms": 15, "sleep_ms": 0, "invalid": false}
//
// sleep_ms delays every decision (to run past the host's call deadline);
// invalid makes DecideRetry answer a negative delay.
package main

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/plugins/sdk"
	"github.com/coordhost/coordhost/policies"
)

type config struct {
	BoundMS int64 `json:"bound_ms"`
	DelayMS int64 `json:"delay_ms"`
	SleepMS int64 `json:"sleep_ms"`
	Invalid bool  `json:"invalid"`
}

type allKinds struct{ cfg atomic.Pointer[config] }

func (a *allKinds) Configure(raw []byte) error {
	c := &config{BoundMS: 5, DelayMS: 15}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, c); err != nil {
			return err
		}
	}
	a.cfg.Store(c)
	return nil
}

func (a *allKinds) sleep() *config {
	c := a.cfg.Load()
	time.Sleep(time.Duration(c.SleepMS) * time.Millisecond)
	return c
}

func (a *allKinds) DecideRetry(context.Context, policies.RetryRequest) policies.RetryDecision {
	c := a.sleep()
	d := time.Duration(c.DelayMS) * time.Millisecond
	if c.Invalid {
		d = -d - 1
	}
	return policies.RetryDecision{Action: policies.RetryAfter, Delay: d}
}

func (a *allKinds) PartitionKey(_ context.Context, r policies.PartitionRequest) (string, error) {
	a.sleep()
	return r.Name + "/" + r.Attributes["k"], nil
}

func (a *allKinds) WriterBound(context.Context, policies.StarvationRequest) time.Duration {
	return time.Duration(a.sleep().BoundMS) * time.Millisecond
}

func main() {
	p := &allKinds{}
	_ = p.Configure(nil)
	sdk.Serve(p)
}

// Command allkinds is a test plugin serving all three policy kinds, with
// knobs for the host's tests (as JSON config):
//
//	{"bound_ms": 5, "delay_ms": 15, "sleep_ms": 0, "invalid": false,
//	 "refuse": "", "panic": "", "fail_configure": "", "stderr": "",
//	 "spawn": false}
//
// sleep_ms delays every decision (to run past the host's call deadline or
// its caller's cancellation); invalid makes DecideRetry answer a negative
// delay; refuse makes PartitionKey refuse with that message; panic makes
// every decision panic with that value (the SDK turns it into a gRPC
// error carrying the text); fail_configure makes Configure fail with that
// message; stderr is written to the process's standard error (which the
// host logs) when configured; spawn starts, when configured, a child in a
// session of its own (setsid) and, through a shell that exits at once, a
// detached grandchild in another session; Info reports their pids as
// "spawned" (comma-separated).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordhost/coordhost/plugins/sdk"
	"github.com/coordhost/coordhost/policies"
)

type config struct {
	BoundMS       int64  `json:"bound_ms"`
	DelayMS       int64  `json:"delay_ms"`
	SleepMS       int64  `json:"sleep_ms"`
	Invalid       bool   `json:"invalid"`
	Refuse        string `json:"refuse"`
	Panic         string `json:"panic"`
	FailConfigure string `json:"fail_configure"`
	Stderr        string `json:"stderr"`
	Spawn         bool   `json:"spawn"`
}

type allKinds struct {
	cfg     atomic.Pointer[config]
	mu      sync.Mutex
	spawned []string
}

func (a *allKinds) Configure(raw []byte) error {
	c := &config{BoundMS: 5, DelayMS: 15}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, c); err != nil {
			return err
		}
	}
	if c.FailConfigure != "" {
		return errors.New(c.FailConfigure)
	}
	if c.Stderr != "" {
		// fd 2 itself: go-plugin points os.Stderr at its stdio stream.
		_, _ = os.NewFile(2, "stderr").WriteString(c.Stderr + "\n")
	}
	if c.Spawn {
		if err := a.spawn(); err != nil {
			return err
		}
	}
	a.cfg.Store(c)
	return nil
}

// spawn starts a setsid child and a detached grandchild.
func (a *allKinds) spawn() error {
	child := exec.Command("sleep", "300")
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return err
	}
	out, err := exec.Command("sh", "-c", `setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!`).Output()
	if err != nil {
		return err
	}
	grandchild := strings.TrimSpace(string(out))
	// Return once it runs sleep in its own session (the shell printed its
	// pid before setsid ran).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if detached(grandchild) {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the grandchild did not detach")
		}
	}
	a.mu.Lock()
	a.spawned = append(a.spawned, strconv.Itoa(child.Process.Pid), grandchild)
	a.mu.Unlock()
	return nil
}

// detached reports whether process pid runs sleep as the leader of its own
// session.
func detached(pid string) bool {
	comm, err := os.ReadFile("/proc/" + pid + "/comm")
	if err != nil || strings.TrimSpace(string(comm)) != "sleep" {
		return false
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:])) // state ppid pgrp session ...
	return len(f) > 3 && f[3] == pid
}

func (a *allKinds) Info() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return map[string]string{"spawned": strings.Join(a.spawned, ",")}
}

func (a *allKinds) sleep() *config {
	c := a.cfg.Load()
	time.Sleep(time.Duration(c.SleepMS) * time.Millisecond)
	if c.Panic != "" {
		panic(c.Panic)
	}
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
	if c := a.sleep(); c.Refuse != "" {
		return "", errors.New(c.Refuse)
	}
	return r.Name + "/" + r.Attributes["k"], nil
}

func (a *allKinds) WriterBound(context.Context, policies.StarvationRequest) time.Duration {
	return time.Duration(a.sleep().BoundMS) * time.Millisecond
}

func main() {
	// The host starts plugins with an empty environment.
	_ = os.Setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
	p := &allKinds{}
	_ = p.Configure(nil)
	sdk.Serve(p)
}

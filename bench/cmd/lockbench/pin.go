package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// placement says where the Go program's threads and Redis run for a
// 1-goroutine measurement. At 1 goroutine every cycle waits on thread
// wake-ups across the TCP loopback, and on a VM waking a thread on another,
// idle vCPU costs tens of µs more than on the same one; left to the Linux
// scheduler, the pair lands now together, now apart, so unpinned
// 1-goroutine cells swing by 3–6× between repetitions. Pinning both ways
// gives two reproducible readings.
type placement int

const (
	placeFree  placement = iota // the scheduler decides (every other cell)
	placeSame                   // the program and Redis on CPU 0
	placeSplit                  // Redis on CPU 0, the program on CPU 1
)

func (p placement) String() string {
	return [...]string{"unpinned", "same CPU", "split CPUs"}[p]
}

// pinnable reports whether placements can be set up here (two CPUs or more
// and sched_setaffinity allowed).
func pinnable() error {
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("%d CPU", runtime.NumCPU())
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return err
	}
	if !set.IsSet(0) || !set.IsSet(1) {
		return fmt.Errorf("this process may not run on CPUs 0 and 1")
	}
	return nil
}

// place pins every thread of this process and of Redis (pid) for p;
// placeFree restores CPUs 0..NumCPU-1 for both.
func place(p placement, redisPid int) error {
	var self, redis unix.CPUSet
	switch p {
	case placeFree:
		for i := range runtime.NumCPU() {
			self.Set(i)
			redis.Set(i)
		}
	case placeSame:
		self.Set(0)
		redis.Set(0)
	case placeSplit:
		self.Set(1)
		redis.Set(0)
	}
	// Twice: a thread started while the first pass ran may have inherited
	// the old set from a thread not yet pinned.
	for range 2 {
		if err := pinAll(os.Getpid(), &self); err != nil {
			return err
		}
		if err := pinAll(redisPid, &redis); err != nil {
			return err
		}
	}
	return nil
}

// pinAll sets the affinity of every thread of pid. Threads the Go runtime
// starts later inherit it from the thread that starts them.
func pinAll(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("sched_setaffinity(%d): %w", tid, err)
		}
	}
	return nil
}

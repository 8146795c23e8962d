// Package lua holds coordhost's Redis scripts, one file per script, embedded
// at build time. Each file's header documents its KEYS, ARGV, result, errors
// and minimum server version.
package lua

import _ "embed"

// Lock scripts (primitives/lock).
var (
	//go:embed lock_acquire.lua
	LockAcquire string
	//go:embed lock_release.lua
	LockRelease string
	//go:embed lock_renew.lua
	LockRenew string
	//go:embed lock_acquire_fifo.lua
	LockAcquireFIFO string
	//go:embed lock_leave_fifo.lua
	LockLeaveFIFO string
)

// Hash-field lease scripts (primitives/lease).
var (
	//go:embed lease_acquire.lua
	LeaseAcquire string
	//go:embed lease_renew.lua
	LeaseRenew string
	//go:embed lease_release.lua
	LeaseRelease string
)

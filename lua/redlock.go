package lua

import _ "embed"

// Redlock scripts (primitives/redlock). Renew and release reuse the lock
// scripts (LockRenew, LockRelease): on each node a Redlock is a plain
// string key holding the token.
var RedlockAcquire = args + redlockAcquire

//go:embed redlock_acquire.lua
var redlockAcquire string

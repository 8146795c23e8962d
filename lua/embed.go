// Package lua holds coordhost's Redis scripts, one file per script, embedded
// at build time. Each file's header documents its KEYS, ARGV, result, errors
// and minimum server version.
//
// Every exported script that takes a TTL or writes more than an
// owner-checked delete starts with args.lua, the argument checks the
// scripts share, so each validates its arguments before its first write.
// The release scripts only compare and delete; they go without it, since
// they run on every release. The rate-limit scripts run on every request
// and use ratelimit_lib.lua's cheaper checks instead.
package lua

import _ "embed"

//go:embed args.lua
var args string

// Lock scripts (primitives/lock).
var (
	LockAcquire     = args + lockAcquire
	LockRelease     = lockRelease
	LockRenew       = args + lockRenew
	LockAcquireFIFO = args + lockAcquireFIFO
	LockLeaveFIFO   = args + lockLeaveFIFO
)

// Hash-field lease scripts (primitives/lease).
var (
	LeaseAcquire = args + leaseAcquire
	LeaseRenew   = args + leaseRenew
	LeaseRelease = leaseRelease
)

// Countdown-latch scripts (primitives/latch), after args.lua and
// latch_lib.lua.
var (
	LatchSet       = args + latchLib + latchSet
	LatchCountDown = args + latchLib + latchCountDown
	LatchRead      = args + latchLib + latchRead
	LatchDelete    = args + latchLib + latchDelete
)

// Read-write lease scripts (primitives/rwlock); rwlock_lib.lua holds the
// helpers they share.
var (
	RWLockAcquireRead  = args + rwlockLib + rwlockAcquireRead
	RWLockAcquireWrite = args + rwlockLib + rwlockAcquireWrite
	RWLockRelease      = rwlockRelease
	RWLockRenew        = args + rwlockLib + rwlockRenew
	RWLockOwner        = args + rwlockLib + rwlockOwner
	RWLockLeave        = args + rwlockLib + rwlockLeave
)

// Semaphore scripts (primitives/semaphore).
var (
	SemaphoreAcquire = args + semaphoreLib + semaphoreAcquire
	SemaphoreRelease = args + semaphoreLib + semaphoreRelease
	SemaphoreRenew   = args + semaphoreLib + semaphoreRenew
	SemaphoreVerify  = semaphoreVerify
)

// Session scripts (host's SessionService), after args.lua and
// session_lib.lua.
var (
	SessionCreate = args + sessionLib + sessionCreate
	SessionRenew  = args + sessionLib + sessionRenew
	SessionGet    = args + sessionLib + sessionGet
	SessionAttach = args + sessionLib + sessionAttach
	SessionClose  = args + sessionLib + sessionClose
	SessionQuota  = args + sessionQuota
)

// Rate-limit scripts (primitives/ratelimit), after ratelimit_lib.lua
// (not args.lua: they run on every request, and ratelimit_lib.lua's
// checks are cheaper).
var (
	RateLimitFixed   = ratelimitLib + ratelimitFixed
	RateLimitSliding = ratelimitLib + ratelimitSliding
	RateLimitBucket  = ratelimitLib + ratelimitBucket
)

// MaxCount is the largest limit or permit count the rate-limit scripts
// accept (MAX_COUNT in ratelimit_lib.lua): sums of counts stay exact in a
// Lua double.
const MaxCount = 1_000_000_000_000_000

// MaxTTLMillis is the longest lease, in milliseconds, that args.lua accepts
// (MAX_TTL_MS there). The primitives refuse longer TTLs before sending.
const MaxTTLMillis = 3_153_600_000_000 // 100 years of 365 days

var (
	//go:embed lock_acquire.lua
	lockAcquire string
	//go:embed lock_release.lua
	lockRelease string
	//go:embed lock_renew.lua
	lockRenew string
	//go:embed lock_acquire_fifo.lua
	lockAcquireFIFO string
	//go:embed lock_leave_fifo.lua
	lockLeaveFIFO string
	//go:embed lease_acquire.lua
	leaseAcquire string
	//go:embed lease_renew.lua
	leaseRenew string
	//go:embed lease_release.lua
	leaseRelease string
	//go:embed latch_lib.lua
	latchLib string
	//go:embed latch_set.lua
	latchSet string
	//go:embed latch_count_down.lua
	latchCountDown string
	//go:embed latch_read.lua
	latchRead string
	//go:embed latch_delete.lua
	latchDelete string
	//go:embed rwlock_lib.lua
	rwlockLib string
	//go:embed rwlock_acquire_read.lua
	rwlockAcquireRead string
	//go:embed rwlock_acquire_write.lua
	rwlockAcquireWrite string
	//go:embed rwlock_release.lua
	rwlockRelease string
	//go:embed rwlock_renew.lua
	rwlockRenew string
	//go:embed rwlock_owner.lua
	rwlockOwner string
	//go:embed rwlock_leave.lua
	rwlockLeave string
	//go:embed semaphore_lib.lua
	semaphoreLib string
	//go:embed semaphore_acquire.lua
	semaphoreAcquire string
	//go:embed semaphore_release.lua
	semaphoreRelease string
	//go:embed semaphore_renew.lua
	semaphoreRenew string
	//go:embed semaphore_verify.lua
	semaphoreVerify string
	//go:embed session_lib.lua
	sessionLib string
	//go:embed session_create.lua
	sessionCreate string
	//go:embed session_renew.lua
	sessionRenew string
	//go:embed session_get.lua
	sessionGet string
	//go:embed session_attach.lua
	sessionAttach string
	//go:embed session_close.lua
	sessionClose string
	//go:embed session_quota.lua
	sessionQuota string
	//go:embed ratelimit_lib.lua
	ratelimitLib string
	//go:embed ratelimit_fixed.lua
	ratelimitFixed string
	//go:embed ratelimit_sliding.lua
	ratelimitSliding string
	//go:embed ratelimit_bucket.lua
	ratelimitBucket string
)

-- rwlock_renew: owner-checked new deadline for one read or write lease.
--
-- KEYS[1]  holders: sorted set of owner members scored by deadline
-- ARGV[1]  member ("r:<token>" or "w:<token>")
-- ARGV[2]  new lease in whole milliseconds (> 0)
--
-- Result: 1 renewed (deadline now + lease; the key expires at the latest
-- deadline, which a shorter renewal may bring forward but never below
-- another live member's); 0 not owned (the member is absent or past its
-- deadline). Readers renew even while waiting writers hold new readers off.
-- Errors (nothing written): WRONGTYPE; COORDHOST_BADARG <why> (see
-- args.lua).
--
-- Minimum server: Redis 5 (TIME before writes). Idempotent for its owner.

local member = token_arg(1, 'member')
local ms = ms_arg(2, 'lease', 1)
local holders = KEYS[1]
local score = redis.call('ZSCORE', holders, member)
local now = now_ms()
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', holders, 'XX', now + ms, member)
expire_at_latest(holders)
return 1

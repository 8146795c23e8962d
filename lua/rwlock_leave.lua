-- rwlock_leave: a waiting writer gives up (cancelled, timed out, closed, or
-- settling an uncertain attempt): its waiting-writer entry goes, so readers
-- are no longer held off on its account; it also releases the write lease if
-- its latest token holds it; and it announces the change, so held-off
-- readers re-attempt.
--
-- KEYS[1]  holders: sorted set of owner members scored by deadline
-- KEYS[2]  waiting writers: hash (same slot)
-- ARGV[1]  writer id
-- ARGV[2]  member of the writer's latest attempt ("w:<token>")
-- ARGV[3]  channel (PUBLISH via pcall: fire and forget)
--
-- Result: 1 when the member held the lease and was deleted, else 0.
-- Errors (nothing written): WRONGTYPE; COORDHOST_BADARG for an empty writer
-- id or member, or aliasing keys.
--
-- Minimum server: Redis 5. Idempotent.

local holders, writers = KEYS[1], KEYS[2]
local wid = token_arg(1, 'writer id')
local member = token_arg(2, 'member')
if #KEYS < 2 then
  bad_arg('the waiting-writers key is missing')
end
distinct_keys()
check_types(holders, writers)
local now = now_ms()

redis.call('HDEL', writers, wid)
local held = 0
local score = redis.call('ZSCORE', holders, member)
if score then
  -- Never touch holders after removing its last member (see
  -- rwlock_release: "non local key" on a MIGRATING cluster slot).
  local last = redis.call('ZCARD', holders) == 1
  redis.call('ZREM', holders, member)
  if tonumber(score) > now then
    held = 1
    if not last then
      expire_at_latest(holders)
    end
  end
end
redis.pcall('PUBLISH', ARGV[3], '')
return held

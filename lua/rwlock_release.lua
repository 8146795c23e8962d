-- rwlock_release: owner-checked release of one read or write lease,
-- announced on the lock's channel.
--
-- KEYS[1]  holders: sorted set of owner members scored by deadline
-- ARGV[1]  member ("r:<token>" or "w:<token>")
-- ARGV[2]  channel (PUBLISH via pcall: fire and forget)
--
-- Result: 1 released (the member was live); 0 nothing to release and no
-- other live owner; -1 nothing to release while another owner holds the
-- lock (nothing of theirs touched). A member found past its deadline is
-- deleted (it was dead already) and answers 0 or -1. After a release the key
-- expires at the latest remaining deadline.
-- Errors (nothing written): WRONGTYPE; COORDHOST_BADARG for an empty
-- member (checked inline, not with args.lua: it runs on every release).
--
-- Minimum server: Redis 5 (TIME before writes). Idempotent for its owner.

if ARGV[1] == nil or ARGV[1] == '' then
  return redis.error_reply('COORDHOST_BADARG member is empty')
end
local holders, member = KEYS[1], ARGV[1]
local score = redis.call('ZSCORE', holders, member)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if score then
  -- The last member goes with its key, and then the script touches the
  -- key no more: on a cluster node whose slot is MIGRATING, a command on
  -- a key the node no longer has fails the script after the writes before
  -- it ("non local key").
  if redis.call('ZCARD', holders) == 1 then
    redis.call('DEL', holders)
    if tonumber(score) > now then
      redis.pcall('PUBLISH', ARGV[2], '')
      return 1
    end
    return 0
  end
  redis.call('ZREM', holders, member)
  if tonumber(score) > now then
    local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
    if last[2] then
      redis.call('PEXPIREAT', holders, last[2])
    end
    redis.pcall('PUBLISH', ARGV[2], '')
    return 1
  end
end
if redis.call('ZCOUNT', holders, '(' .. string.format('%.0f', now), '+inf') > 0 then
  return -1
end
return 0

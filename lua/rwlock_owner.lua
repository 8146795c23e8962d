-- rwlock_owner: whether one read or write lease is live (for Verify).
-- Writes nothing.
--
-- KEYS[1]  holders: sorted set of owner members scored by deadline
-- ARGV[1]  member ("r:<token>" or "w:<token>")
--
-- Result: 1 when the member is present with a deadline after now; 0 when
-- it is absent, past its deadline, or the key holds another type (no lease
-- of this primitive can live there).
--
-- Minimum server: Redis 5.

local t = redis.call('TYPE', KEYS[1])
if t.ok ~= 'zset' then
  return 0
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1] or '')
local now = now_ms()
if score and tonumber(score) > now then
  return 1
end
return 0

-- semaphore_verify: whether a permit is live, on the server's clock.
--
-- KEYS[1]  permit set
-- ARGV[1]  ownership token
--
-- Result: 1 when the token's permit is live (deadline after now, or no
-- expiry); 0 otherwise. Writes nothing.
-- Errors: WRONGTYPE when the key holds another type.
--
-- Minimum server: Redis 6.2.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
if score == 'inf' then
  return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(score) > now then
  return 1
end
return 0

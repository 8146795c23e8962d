-- session_quota: counts a new session against its API token's max_sessions,
-- across every daemon on the server. The token's sessions are a sorted set
-- of session ids scored by their expiry (ms on TIME's clock); expired ones
-- are dropped first, so a session that nobody closed stops counting when it
-- expires.
--
-- KEYS[1]  the token's sorted set
-- ARGV[1]  the new session's id
-- ARGV[2]  the token's max_sessions (a positive integer)
-- ARGV[3]  the new session's TTL in ms
--
-- Result: 1 counted (added); 0 the token holds ARGV[2] live sessions
-- already (nothing added).
-- Errors (nothing written): COORDHOST_BADARG, WRONGTYPE.
--
-- Minimum server: Redis 2.6. Idempotent for one id.

local ttl = ms_arg(3, 'ttl', 1)
local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit ~= math.floor(limit) then
  bad_arg('max_sessions must be a positive integer')
end
if (ARGV[1] or '') == '' then
  bad_arg('session id is empty')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= limit and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1

-- session_get: reads a session and its grants without renewing it.
--
-- KEYS[1]  session key
-- ARGV[1]  the caller's API token label ("" without auth)
--
-- Result: the session answer of session_lib.lua with its grant ids; nil
-- when the session is gone.
-- Errors: COORDHOST_NOTOWNER when ARGV[1] is not the session's token;
-- WRONGTYPE when the key is not a hash. Writes nothing.
--
-- Minimum server: Redis 2.6.

local v = redis.call('HMGET', KEYS[1], 'ttl', 'rod', 'tok')
if not v[1] then
  return false
end
session_check_owner(v[3], ARGV[1])
return session_answer(KEYS[1], v[1], v[2], true)

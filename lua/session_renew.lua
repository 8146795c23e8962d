-- session_renew: renews a live session by its TTL and lists its grants
-- (which the daemon then renews by the same TTL). A closed or expired
-- session is not resurrected.
--
-- KEYS[1]  session key
-- ARGV[1]  the caller's API token label ("" without auth)
-- ARGV[2]  the id of the KeepAlive stream renewing it, recorded as ka;
--          "" for a RenewSession (ka is left as it is)
--
-- Result: the session answer of session_lib.lua with its grant ids; nil
-- when the session is gone.
-- Errors (nothing written): COORDHOST_NOTOWNER when ARGV[1] is not the
-- session's token; WRONGTYPE when the key is not a hash; COORDHOST_BADARG
-- when an argument is missing (checked first: a missing ARGV[2] would
-- otherwise fail the HSET after the PEXPIRE).
--
-- Minimum server: Redis 2.6.

if type(ARGV[1]) ~= 'string' or type(ARGV[2]) ~= 'string' then
  bad_arg('session_renew takes the token label and the keep-alive id')
end
local v = redis.call('HMGET', KEYS[1], 'ttl', 'rod', 'tok')
if not v[1] then
  return false
end
session_check_owner(v[3], ARGV[1])
redis.call('PEXPIRE', KEYS[1], v[1])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'ka', ARGV[2])
end
return session_answer(KEYS[1], v[1], v[2], true)

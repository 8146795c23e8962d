-- session_create: starts a session; never overwrites one.
--
-- KEYS[1]  session key
-- ARGV[1]  TTL in ms (1 to MAX_TTL_MS)
-- ARGV[2]  release_on_disconnect: "0" or "1"
-- ARGV[3]  the creating API token's label ("" without auth)
--
-- Result: the session answer of session_lib.lua, without grants; nil when
-- the key exists (a random 128-bit id that is taken means a broken random
-- source, not a session to reset).
-- Errors (nothing written): COORDHOST_BADARG for a bad TTL or flag.
--
-- Minimum server: Redis 2.6. Not idempotent: never retried.

local ttl = ms_arg(1, 'ttl', 1)
if ARGV[2] ~= '0' and ARGV[2] ~= '1' then
  bad_arg('release_on_disconnect must be 0 or 1')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
redis.call('HSET', KEYS[1], 'ttl', ARGV[1], 'rod', ARGV[2], 'tok', ARGV[3] or '')
redis.call('PEXPIRE', KEYS[1], ttl)
return session_answer(KEYS[1], ARGV[1], ARGV[2], false)

-- session_close: ends a session and returns its grants, which the daemon
-- then releases.
--
-- KEYS[1]  session key
-- ARGV[1]  the caller's API token label ("" without auth)
-- ARGV[2]  "" to close unconditionally; else the id of a KeepAlive stream
--          that broke: the session is closed only if that stream renewed
--          it last (ka), so an old stream ending at one daemon does not end
--          a session its client now keeps alive at another
--
-- Result: nil when the session is gone; {0} when ARGV[2] is not the last
-- renewer (nothing written); else {1, grant id...} and the key is deleted.
-- Errors (nothing written): COORDHOST_NOTOWNER, WRONGTYPE.
--
-- Minimum server: Redis 2.6. Idempotent.

local v = redis.call('HMGET', KEYS[1], 'ttl', 'tok', 'ka')
if not v[1] then
  return false
end
session_check_owner(v[2], ARGV[1])
if ARGV[2] ~= '' and v[3] ~= ARGV[2] then
  return {0}
end
local out = {1}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'g:' then
    out[#out + 1] = all[i + 1]
  end
end
redis.call('DEL', KEYS[1])
return out

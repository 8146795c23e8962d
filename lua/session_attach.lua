-- session_attach: records a grant in a live session and renews the session
-- (taking a grant through it is a sign of life). The grant was taken with
-- the session's TTL just before, so the two expire together unless renewed.
--
-- KEYS[1]  session key
-- ARGV[1]  the caller's API token label ("" without auth)
-- ARGV[2]  the grant's field: "g:" .. its ownership token
-- ARGV[3]  the grant id
-- ARGV[4]  the most grants a session may hold (a positive integer)
--
-- Result: 1 recorded; 0 the session is gone (the caller releases the
-- grant); -1 the session already holds ARGV[4] grants (nothing written).
-- Errors (nothing written): COORDHOST_NOTOWNER, COORDHOST_BADARG,
-- WRONGTYPE.
--
-- Minimum server: Redis 2.6. Idempotent.

if string.sub(ARGV[2] or '', 1, 2) ~= 'g:' or #ARGV[2] < 3 then
  bad_arg('grant field must be g:<token>')
end
local limit = tonumber(ARGV[4])
if not limit or limit < 1 then
  bad_arg('grant limit must be a positive integer')
end
local v = redis.call('HMGET', KEYS[1], 'ttl', 'tok')
if not v[1] then
  return 0
end
session_check_owner(v[2], ARGV[1])
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
  local n = 0
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, 2) == 'g:' then
      n = n + 1
    end
  end
  if n >= limit then
    return -1
  end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], v[1])
return 1

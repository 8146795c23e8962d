-- lock_release: owner-checked delete that announces the release.
--
-- KEYS[1]  lock key
-- ARGV[1]  ownership token
-- ARGV[2]  release channel; PUBLISHed to fire-and-forget (pcall: a missing
--          pub/sub permission never fails the release)
--
-- Result: 1 released; 0 key absent (expired or released before);
--         -1 held by another owner (nothing deleted).
-- Errors (nothing written): WRONGTYPE when the key holds a non-string
-- value; COORDHOST_BADARG for an empty token (it would match an empty
-- value). It checks inline rather than with args.lua: it runs on every
-- release.
--
-- Minimum server: Redis 2.6. Idempotent for its owner.

if ARGV[1] == nil or ARGV[1] == '' then
  return redis.error_reply('COORDHOST_BADARG token is empty')
end
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
if v ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', ARGV[2], '')
return 1

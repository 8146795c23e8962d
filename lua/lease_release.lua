-- lease_release: owner-checked delete of one hash field, announced on the
-- field's release channel.
--
-- KEYS[1]  hash key
-- ARGV[1]  field
-- ARGV[2]  ownership token
-- ARGV[3]  release channel (PUBLISH via pcall: fire and forget)
--
-- Result: 1 released; 0 field absent (expired or released before);
--         -1 another owner holds the field (nothing deleted).
-- Errors (nothing written): WRONGTYPE when the key holds a non-hash
-- value; COORDHOST_BADARG for an empty field or token (checked inline, not
-- with args.lua: it runs on every release).
--
-- Minimum server: Redis 2.0 (HGET/HDEL); leases exist only on 7.4+.
-- Idempotent for its owner.

if ARGV[1] == nil or ARGV[1] == '' or ARGV[2] == nil or ARGV[2] == '' then
  return redis.error_reply('COORDHOST_BADARG field or token is empty')
end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  return 0
end
if v ~= ARGV[2] then
  return -1
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.pcall('PUBLISH', ARGV[3], '')
return 1

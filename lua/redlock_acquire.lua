-- redlock_acquire: one node's part of a Redlock acquisition: SET NX PX of
-- the group's token, refused without writing when the server is not the
-- process the group identified on this node (its run_id changed: a restart
-- or a failover that may have lost grants).
--
-- KEYS[1]  lock key
-- ARGV[1]  ownership token (random, non-empty; the same on every node)
-- ARGV[2]  lease in whole milliseconds (> 0)
-- ARGV[3]  the run_id the group last saw on this node (non-empty)
--
-- Result (run_id and uptime are this server's, from INFO server):
--   {1, run_id, uptime_s}              granted
--   {0, run_id, uptime_s, holder, pttl} held: holder's token and remaining
--                                      TTL in ms (-1 when the key has no
--                                      TTL). The GET also registers the key
--                                      for client tracking.
--   {-1, run_id, uptime_s}             refused, nothing written: run_id
--                                      differs from ARGV[3]
-- Errors (nothing written):
--   WRONGTYPE ...                 the lock key holds a non-string value
--   COORDHOST_BADARG <why>        an empty token or run_id, or a lease
--                                 outside [1, MAX_TTL_MS] (see args.lua)
--
-- Minimum server: Redis 2.6.12 (SET NX PX; INFO is allowed in scripts).
-- Not idempotent: never retry.

token_arg(1, 'token')
ms_arg(2, 'lease', 1)
token_arg(3, 'expected run_id')

local info = redis.call('INFO', 'server')
local run_id = string.match(info, 'run_id:(%x+)') or ''
local uptime = string.match(info, 'uptime_in_seconds:(%d+)') or '0'
if run_id ~= ARGV[3] then
  return {-1, run_id, uptime}
end

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, run_id, uptime}
end
-- GET raises WRONGTYPE for a foreign value and registers tracking.
local holder = redis.call('GET', KEYS[1])
return {0, run_id, uptime, holder, redis.call('PTTL', KEYS[1])}

-- rwlock_acquire_write: take the exclusive write lease, and optionally keep
-- the caller's place among the waiting writers (see rwlock_lib.lua for the
-- keys' layout).
--
-- KEYS[1]  holders: sorted set of owner members scored by deadline
-- KEYS[2]  waiting writers: hash (same slot)
-- KEYS[3]  grant log (only when ARGV[6] == "1"; see rwlock_acquire_read)
-- ARGV[1]  ownership token (random, non-empty)
-- ARGV[2]  lease in whole milliseconds (> 0)
-- ARGV[3]  writer id: the caller's waiting-writer entry, one per waiting
--          call and kept across its attempts; may be empty when ARGV[4] is 0
-- ARGV[4]  entry lease in ms: how long the entry lives unrefreshed; 0 = do
--          not register (a one-shot try that leaves nothing behind)
-- ARGV[5]  starvation bound in ms: new readers are refused once the entry
--          has waited this long; -1 = unbounded (never)
-- ARGV[6]  "1" when the last key is a grant log (optional)
--
-- Expired holders and dead entries are pruned first. The writer is granted
-- when no live member is left (waiting writers never stop a writer); its
-- entry then leaves, and every other waiting writer's arrival becomes now,
-- so readers get a turn before the next writer holds them off.
--
-- Result:
--   {1, now}    granted: "w:<token>" added with deadline now + lease, the
--               key expires then. now is the server time (ms).
--   {0, wait_ms, reason, readers, writers, oldest_wait_ms}
--               refused. reason 1: a writer holds; 2: readers hold. wait_ms
--               is the time until the last live holder's lease ends;
--               readers is the number of live readers; writers the number
--               of live waiting-writer entries (the caller's included when
--               registered) and oldest_wait_ms how long the oldest of them
--               has waited (-1: none). The entry, when registered, is
--               created with arrival now or refreshed (arrival kept); it
--               is rewritten only when new, its bound changed, or less
--               than half its lease is left.
-- The read of the holders key registers it for client tracking on the
-- calling connection.
-- Errors (nothing written): WRONGTYPE; COORDHOST_BADARG <why> (see
-- args.lua), a bound that is not -1 or a whole number of ms.
--
-- Minimum server: Redis 5. Not idempotent: never retry.

local holders, writers = KEYS[1], KEYS[2]
local token = token_arg(1, 'token')
local ms = ms_arg(2, 'lease', 1)
local entry_ms = ms_arg(4, 'entry lease', 0)
local wid = ARGV[3] or ''
if entry_ms > 0 and wid == '' then
  bad_arg('writer id is empty')
end
local bound = UNBOUNDED
if ARGV[5] ~= '-1' then
  bound = ms_arg(5, 'starvation bound', 0)
end
if #KEYS < 2 then
  bad_arg('the waiting-writers key is missing')
end
distinct_keys()
local log = grant_log(6, 3)
check_types(holders, writers)
local now = now_ms()

local n = live_holders(holders, now)
local live, dead = live_writers(writers, now)
if n == 0 then
  local member = 'w:' .. token
  redis.call('ZADD', holders, now + ms, member)
  prune_holders(holders, now)
  redis.call('PEXPIREAT', holders, fmt(now + ms))
  local others = {}
  for _, w in ipairs(live) do
    if w.id == wid then
      dead[#dead + 1] = wid
    else
      w.arrival = now
      save_writer(writers, w)
      others[#others + 1] = w
    end
  end
  expire_writers(writers, others)
  drop_writers(writers, dead)
  if log then
    redis.call('RPUSH', log, member)
  end
  return {1, now}
end

prune_holders(holders, now)
local first = redis.call('ZRANGE', holders, 0, 0)
local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
local reason, readers = 2, n
if string.sub(first[1], 1, 2) == 'w:' then
  reason, readers = 1, 0
end

if entry_ms > 0 then
  local mine = nil
  for _, w in ipairs(live) do
    if w.id == wid then
      mine = w
    end
  end
  if not mine then
    mine = {id = wid, arrival = now, bound = bound, deadline = now + entry_ms}
    live[#live + 1] = mine
    save_writer(writers, mine)
    expire_writers(writers, live)
  elseif mine.bound ~= bound or mine.deadline - now < entry_ms / 2 then
    mine.bound, mine.deadline = bound, now + entry_ms
    save_writer(writers, mine)
    expire_writers(writers, live)
  end
end

local oldest = -1
for _, w in ipairs(live) do
  if oldest < 0 or w.arrival < oldest then
    oldest = w.arrival
  end
end
if oldest >= 0 then
  oldest = now - oldest
end
if entry_ms > 0 then
  -- Our own entry, if it was dead, was written anew above: keep it.
  for i = #dead, 1, -1 do
    if dead[i] == wid then
      table.remove(dead, i)
    end
  end
end
drop_writers(writers, dead)
return {0, tonumber(last[2]) - now, reason, readers, #live, oldest}

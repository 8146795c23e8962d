-- rwlock_lib: helpers the read-write lease scripts share. lua/embed.go puts
-- it after args.lua in front of each rwlock script.
--
-- Holders (the lock's key) is a sorted set of owner members, "r:<token>"
-- for a reader and "w:<token>" for a writer, each scored by its deadline in
-- server milliseconds. Live members are readers only, or one writer alone.
-- The key expires at its latest deadline, so a short lease never shortens a
-- longer one's life.
--
-- Waiting writers (a second key in the same slot) is a hash: field = a
-- writer's id, value = "<arrival> <bound> <deadline>" in server ms. A
-- writer's entry holds new readers off once now >= arrival + bound; bound
-- -1 (unbounded) never does. An entry past its deadline is dead (its writer
-- stopped refreshing it) and is deleted by the next script that reads it.
-- The key expires at (or after) its latest deadline.

local UNBOUNDED = -1

-- now_ms returns the server time in whole milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fmt formats a whole number without an exponent.
local function fmt(n)
  return string.format('%.0f', n)
end

-- check_types raises WRONGTYPE, before anything is written, when holders is
-- not a sorted set or writers not a hash (absent keys are fine).
local function check_types(holders, writers)
  redis.call('ZCARD', holders)
  if writers then
    redis.call('HLEN', writers)
  end
end

-- live_holders counts the members whose deadline has not passed.
local function live_holders(holders, now)
  return redis.call('ZCOUNT', holders, '(' .. fmt(now), '+inf')
end

-- prune_holders deletes the members whose deadline has passed. Call it
-- only while a live member remains (live_holders > 0, or one was just
-- added), so that it never empties (deletes) the set: on a cluster node
-- whose slot is MIGRATING, a command on a key the node no longer has fails
-- the script after the writes before it ("non local key").
local function prune_holders(holders, now)
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
end

-- expire_at_latest sets holders to expire at its latest deadline.
local function expire_at_latest(holders)
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', holders, last[2])
  end
end

-- live_writers returns the live entries of the waiting-writers hash as
-- {id, arrival, bound, deadline} tables, and the ids of the dead or
-- malformed ones, which the caller deletes (drop_writers) after its last
-- other command on the hash: deleting them may empty (delete) it (see
-- prune_holders).
local function live_writers(writers, now)
  local flat = redis.call('HGETALL', writers)
  local live, dead = {}, {}
  for i = 1, #flat, 2 do
    local a, b, d = string.match(flat[i + 1], '^(%d+) (%-?%d+) (%d+)$')
    if a and tonumber(d) > now then
      live[#live + 1] = {id = flat[i], arrival = tonumber(a), bound = tonumber(b), deadline = tonumber(d)}
    else
      dead[#dead + 1] = flat[i]
    end
  end
  return live, dead
end

-- drop_writers deletes the entries ids (none: nothing) of the
-- waiting-writers hash in one command: the script's last on it.
local function drop_writers(writers, ids)
  if #ids > 0 then
    redis.call('HDEL', writers, unpack(ids))
  end
end

-- save_writer writes one waiting-writer entry.
local function save_writer(writers, w)
  redis.call('HSET', writers, w.id, fmt(w.arrival) .. ' ' .. fmt(w.bound) .. ' ' .. fmt(w.deadline))
end

-- expire_writers sets the waiting-writers hash to expire at the latest
-- deadline of live (a list of entries; empty: nothing to do).
local function expire_writers(writers, live)
  local latest = 0
  for _, w in ipairs(live) do
    if w.deadline > latest then
      latest = w.deadline
    end
  end
  if latest > 0 then
    redis.call('PEXPIREAT', writers, fmt(latest))
  end
end

-- grant_log returns the grant log key (the last key) when ARGV[i] is "1",
-- checking that it has a key of its own and holds a list (or nothing).
local function grant_log(i, want_keys)
  if ARGV[i] ~= '1' then
    return nil
  end
  if #KEYS < want_keys then
    bad_arg('a grant log needs a key of its own')
  end
  redis.call('LLEN', KEYS[#KEYS])
  return KEYS[#KEYS]
end

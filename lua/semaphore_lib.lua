-- semaphore_lib: helpers shared by the semaphore scripts. lua/embed.go puts
-- it (after args.lua) in front of each semaphore script's source.
--
-- A semaphore is a sorted set of permits (member = ownership token, score =
-- the permit's server-time deadline in ms, +inf for a permit without
-- expiry) and a companion string key in the same slot holding the capacity
-- every contender must use.

-- MAX_CAPACITY is the largest capacity a script accepts (semaphore.MaxCapacity
-- in Go; a test keeps the two equal).
local MAX_CAPACITY = 1000000000

-- sem_now returns the server's time in whole milliseconds.
local function sem_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- sem_capacity_arg returns ARGV[i] as a capacity in [1, MAX_CAPACITY].
local function sem_capacity_arg(i)
  local s = ARGV[i]
  if type(s) ~= 'string' or not string.match(s, '^[1-9][0-9]*$') or #s > 10 or tonumber(s) > MAX_CAPACITY then
    bad_arg('capacity must be a whole number in [1, ' .. MAX_CAPACITY .. ']')
  end
  return tonumber(s)
end

-- sem_live counts the permits whose deadline is after now.
local function sem_live(zset, now)
  return redis.call('ZCOUNT', zset, '(' .. now, '+inf')
end

-- sem_expire gives both keys the lifetime of the longest live permit: none
-- while a permit without expiry lives, else the latest deadline. The key's
-- expiry never cuts a live permit short. Call it only while a live permit
-- remains: a script that may empty the set deletes both keys itself,
-- before touching them again (see semaphore_release).
local function sem_expire(zset, capkey)
  if redis.call('ZCOUNT', zset, '+inf', '+inf') > 0 then
    redis.call('PERSIST', zset)
    redis.call('PERSIST', capkey)
    return
  end
  local last = redis.call('ZREVRANGE', zset, 0, 0, 'WITHSCORES')
  redis.call('PEXPIREAT', zset, last[2])
  redis.call('PEXPIREAT', capkey, last[2])
end

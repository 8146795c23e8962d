-- ratelimit_sliding: one decision of a sliding-window rate limiter.
--
-- KEYS[1]  the window (hash: segment end in server microseconds -> permits
--          consumed in that segment)
-- ARGV[1..3] consume, need, limit (see ratelimit_lib.lua)
-- ARGV[4]  window in whole milliseconds in [1, MAX_TTL_MS]
-- ARGV[5]  segments, a whole number in [1, window]
--
-- Result: {granted, remaining, retry_us, reset_us, now_us} (see
-- ratelimit_lib.lua).
-- Errors (nothing written):
--   WRONGTYPE ...              KEYS[1] is not a hash
--   COORDHOST_WRONGKIND <why>  KEYS[1] holds fields this script did not write
--   COORDHOST_BADARG <why>     an argument out of range
--
-- A permit consumed at t is counted in the segment ending at
-- e = (floor(t / seg) + 1) * seg > t (rounded forward) and stops counting
-- at e + window, never before t + window: so no interval of length window
-- ever holds more than the limit, and a permit is back at most one segment
-- later than an exact sliding log would give it back. The hash holds at
-- most segments + 1 live fields; expired ones are deleted on the next
-- grant, and the key expires when its last segment does.
-- Minimum server: Redis 6.2 (tested on 7.0). Not idempotent: never retry.

local consume, need, limit = permit_args()
local window = ms_arg(4, 'window', 1)
local segments = count_arg(5, 'segments', 1)
if segments > window then
  bad_arg('segments ' .. segments .. ' exceed the window of ' .. window .. 'ms (a segment is at least 1ms)')
end
local span = window * 1000
local seg = math.floor(span / segments)
local now = now_us()

local flat = redis.call('HGETALL', KEYS[1])
local used = 0
local live = {}
local dead = {}
for i = 1, #flat, 2 do
  local e, n = whole(flat[i]), whole(flat[i + 1])
  if not e or not n then
    wrong_kind('the window holds field ' .. string.format('%q', string.sub(flat[i], 1, 32)) .. ', not a segment count')
  end
  if e + span <= now then
    dead[#dead + 1] = flat[i]
  else
    used = used + n
    live[#live + 1] = {e, n}
  end
end
table.sort(live, function(a, b) return a[1] < b[1] end)

if used + need <= limit then
  if consume > 0 then
    local e = (math.floor(now / seg) + 1) * seg
    if #dead > 0 then
      redis.call('HDEL', KEYS[1], unpack(dead))
    end
    redis.call('HINCRBY', KEYS[1], int(e), consume)
    local last = e
    if #live > 0 and live[#live][1] > last then last = live[#live][1] end
    expire_in(last + span - now)
    if #live == 0 or e < live[1][1] then
      table.insert(live, 1, {e, consume})
    end
  end
  local reset = 0
  if #live > 0 then reset = live[1][1] + span - now end
  return {1, limit - used - consume, 0, reset, now}
end

-- Refused: the earliest time enough segments have ended.
local retry, freed = 0, used
for i = 1, #live do
  freed = freed - live[i][2]
  if freed + need <= limit then
    retry = live[i][1] + span - now
    break
  end
end
local remaining = limit - used
if remaining < 0 then remaining = 0 end
return {0, remaining, retry, live[1][1] + span - now, now}

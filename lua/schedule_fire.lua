-- schedule_fire: add due schedules' occurrences and move each one's next due time, in one step,
-- for each schedule the caller read as it still is (a compare-and-set: of any number of
-- schedulers racing, one adds each occurrence).
--#include queue.lua
--#include events.lua
--#include wake.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1...) schedules: for each schedule, seven or more arguments: its name; the definition
--   the caller read; the next due time it read (ms since the epoch, which must have passed by
--   the server's clock); the next due time after this call ('+inf': none left); '1' to add
--   nothing while the last occurrence added still exists (queued, leased or delayed), else '0';
--   n, the number of occurrences to add; then their n ids, oldest first (none: skip the times)
-- Returns, per schedule, -1 when it is not as the caller read it (another scheduler moved it,
-- or it was changed, paused or removed: nothing of it changed), else the ids of the
-- occurrences added.
-- Keeps: an occurrence is added only while its schedule's next due time is the one it is for,
-- and that time moves past it in the same call, so each is added once; an id that exists
-- already is not added again; every key the call may write is type-checked before its first
-- write.
check_types('zset', {Q.schedules_due}, 'hash', {Q.schedules, Q.schedules_data,
  Q.schedules_last, Q.counts, Q.deliveries, Q.reasons}, 'list', {Q.queue})
check_wake(Q)
local now = now_ms()
local replies, added = {}, {}
local i = NQ + 1
while i <= #ARGV do
  local name, spec, due, after, skip = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3],
    ARGV[i + 4] == '1'
  local n = tonumber(ARGV[i + 5])
  local first, last = i + 6, i + 5 + n
  i = last + 1
  local score = redis.call('ZSCORE', Q.schedules_due, name)
  if not score or tonumber(score) ~= due or due > now
    or redis.call('HGET', Q.schedules, name) ~= spec then
    replies[#replies + 1] = -1
  else
    if skip and n > 0 then
      local previous = redis.call('HGET', Q.schedules_last, name)
      if previous and redis.call('EXISTS', Q.item .. previous) == 1 then
        first = last + 1
      end
    end
    local mine = {}
    if first <= last then
      local data = redis.call('HGET', Q.schedules_data, name) or ''
      for k = first, last do
        -- A data key of another type is left alone: that occurrence is not added.
        if redis.call('SET', Q.item .. ARGV[k], data, 'NX') then
          mine[#mine + 1] = ARGV[k]
          added[#added + 1] = ARGV[k]
        end
      end
    end
    if #mine > 0 then
      redis.call('HSET', Q.schedules_last, name, mine[#mine])
    end
    redis.call('ZADD', Q.schedules_due, after, name)
    replies[#replies + 1] = mine
  end
end
if #added > 0 then
  -- A new item starts without bookkeeping (a count left by another client is dropped).
  if SIZES[Q.deliveries] ~= 0 then
    redis.call('HDEL', Q.deliveries, unpack(added))
  end
  if SIZES[Q.reasons] ~= 0 then
    redis.call('HDEL', Q.reasons, unpack(added))
  end
  redis.call('LPUSH', Q.queue, unpack(added))
  wake(Q, #added)
  count(Q, 'added', #added)
  for _, id in ipairs(added) do
    emit(Q, 'added', id)
  end
end
return replies

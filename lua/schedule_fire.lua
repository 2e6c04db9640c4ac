-- schedule_fire: add a schedule's due occurrences and move its next due time, in one step, when
-- the caller read the schedule as it still is (a compare-and-set: of any number of schedulers
-- racing, one adds each occurrence).
--#include queue.lua
--#include wake.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) name: the schedule's name
-- arg(2) spec: the definition the caller read
-- arg(3) due_ms: the next due time the caller read (it must have passed by the server's clock)
-- arg(4) next_ms: the next due time after this call, in ms since the epoch ('+inf': none left)
-- arg(5) overlap: '1' to add nothing while the last occurrence added still exists (queued,
--   leased or delayed), '0' to add regardless
-- arg(6...) ids: the ids of the occurrences to add, oldest first (none: skip the due times)
-- Returns -1 when the schedule is not as the caller read it (another scheduler moved it, or it
-- was changed, paused or removed; nothing changed), else the ids of the occurrences added.
-- Keeps: an occurrence is added only while the schedule's next due time is the one it is for,
-- and that time moves past it in the same call, so each is added once; an id that exists
-- already is not added again; every key the call may write is type-checked before its first
-- write.
local name, due = arg(1), tonumber(arg(3))
check_types('zset', {Q.schedules_due}, 'hash', {Q.schedules, Q.schedules_data,
  Q.schedules_last, Q.counts, Q.deliveries, Q.reasons}, 'list', {Q.queue})
check_wake(Q)
local score = redis.call('ZSCORE', Q.schedules_due, name)
if not score or tonumber(score) ~= due or due > now_ms()
  or redis.call('HGET', Q.schedules, name) ~= arg(2) then
  return -1
end
local ids = {}
for i = 6, #ARGV - NQ do
  ids[#ids + 1] = arg(i)
end
if arg(5) == '1' and #ids > 0 then
  local last = redis.call('HGET', Q.schedules_last, name)
  if last and redis.call('EXISTS', Q.item .. last) == 1 then
    ids = {}
  end
end
local data = redis.call('HGET', Q.schedules_data, name) or ''
local added = {}
for _, id in ipairs(ids) do
  -- A data key of another type is left alone: that occurrence is not added.
  if redis.call('SET', Q.item .. id, data, 'NX') then
    added[#added + 1] = id
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
  redis.call('HSET', Q.schedules_last, name, added[#added])
end
redis.call('ZADD', Q.schedules_due, arg(4), name)
return added

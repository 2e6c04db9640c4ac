-- add: add items, each unless its id exists already (or without that check).
--#include queue.lua
--#include wake.lua
--#include delay.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) '1' to skip the existence check ('p': skip it, for one item queued on a caller's
-- pipeline), arg(2) delay in ms (0: none), arg(3) due time in ms since the epoch (0: none; wins
-- over the delay), arg(4) time to live in ms (0: none), then pairs of arg(5+2k) id and
-- arg(6+2k) data
-- Returns, per item, 1 when it was added and 0 when its id existed already (nothing changed);
-- with 'p', a plain 1, as the reference client's SET replies on a pipeline.
-- Keeps: the data keys are written before the ids are pushed; an existing item is never queued
-- a second time (unless the check is skipped); a new item starts without bookkeeping (a count
-- left by a client of another implementation is dropped); a delayed item holds a delay lease,
-- so no cleaner queues it early; every key the call may write is type-checked before its first
-- write.
local unique, delay, at, ttl = arg(1) ~= '0', tonumber(arg(2)), tonumber(arg(3)), tonumber(arg(4))
local now, due = 0, 0
if delay > 0 or at > 0 then
  now = now_ms()
  due = at > 0 and at or now + delay
end
-- Every key the call may write is checked before its first write. Without the existence check,
-- the first item's SET ... GET fails by itself on a data key of the wrong type (with the check, SET
-- NX leaves such a key alone: that item is not added); a delayed item's lease key is replaced.
local strings = {}
for i = NQ + 5, #ARGV, 2 do
  if unique and i > NQ + 5 then
    strings[#strings + 1] = Q.item .. ARGV[i]
  end
  if due > now then
    strings[#strings + 1] = Q.lease .. ARGV[i]
  end
end
local sets = due > now and {Q.delayed} or {}
check_types('list', {Q.queue}, 'hash', {Q.deliveries, Q.reasons, Q.counts}, 'zset', sets,
  'string', strings)
check_wake(Q)
local added, ready, fresh_ids, written = {}, {}, {}, 0
for i = NQ + 5, #ARGV, 2 do
  local id, data = ARGV[i], ARGV[i + 1]
  local key = Q.item .. id
  local ok, fresh
  if unique then
    local old
    if ttl > 0 then
      old = redis.call('SET', key, data, 'PX', ttl, 'GET')
    else
      old = redis.call('SET', key, data, 'GET')
    end
    ok, fresh = true, not old
  else
    if ttl > 0 then
      ok = redis.call('SET', key, data, 'PX', ttl, 'NX')
    else
      ok = redis.call('SET', key, data, 'NX')
    end
    fresh = ok
  end
  if fresh then
    fresh_ids[#fresh_ids + 1] = id
  end
  if ok then
    if due > now then
      schedule(Q, id, due, now)
    else
      ready[#ready + 1] = id
    end
    added[#added + 1] = 1
    written = written + 1
  else
    added[#added + 1] = 0
  end
end
if #fresh_ids > 0 then
  redis.call('HDEL', Q.deliveries, unpack(fresh_ids))
  redis.call('HDEL', Q.reasons, unpack(fresh_ids))
end
if #ready > 0 then
  redis.call('LPUSH', Q.queue, unpack(ready))
  wake(Q, #ready)
end
count(Q, 'added', written)
if arg(1) == 'p' then
  return 1
end
return added

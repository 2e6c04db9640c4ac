-- add: add one or more items, each unless its id exists already (or without that check).
--#include queue.lua
-- arg(1) '1' to skip the existence check, arg(2) delay in ms (0: none), arg(3) due time in ms
-- since the epoch (0: none; wins over the delay), arg(4) time to live in ms (0: none), then
-- pairs of arg(5+2k) id and arg(6+2k) data
-- Returns, per item, 1 when it was added and 0 when its id existed already (nothing changed).
-- Keeps: the data keys are written before the ids are pushed; an existing item is never queued
-- a second time (unless the check is skipped); a delayed item holds a delay lease, so no cleaner
-- queues it early.
guard(Q, 'queue', 'delayed')
local unique, delay, at, ttl = arg(1) == '1', tonumber(arg(2)), tonumber(arg(3)), tonumber(arg(4))
local now, due = 0, 0
if delay > 0 or at > 0 then
  now = now_ms()
  due = at > 0 and at or now + delay
end
local added, ready = {}, {}
for i = 4 * NQ + 5, #ARGV, 2 do
  local id, key, data = ARGV[i], Q.item .. ARGV[i], ARGV[i + 1]
  local ok
  if unique and ttl > 0 then
    ok = redis.call('SET', key, data, 'PX', ttl)
  elseif unique then
    ok = redis.call('SET', key, data)
  elseif ttl > 0 then
    ok = redis.call('SET', key, data, 'PX', ttl, 'NX')
  else
    ok = redis.call('SET', key, data, 'NX')
  end
  if ok then
    if due > now then
      schedule(Q, id, due, now)
    else
      ready[#ready + 1] = id
    end
    added[#added + 1] = 1
  else
    added[#added + 1] = 0
  end
end
if #ready > 0 then
  redis.call('LPUSH', Q.queue, unpack(ready))
  wake(Q)
end
return added

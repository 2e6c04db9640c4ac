-- lease: lease up to count items from one or more queues, in the queues' order (highest
-- priority first), without blocking; or hand them out at most once. Due delayed items are moved
-- onto their main queue first.
--#include queue.lua
--#include wake.lua
--#include delay.lua
--#include take.lua
-- arg(1) lease length in ms, arg(2) lease token, arg(3) '1' to hand items out at most once,
-- arg(4) how many items, arg(5) when nothing is found: ms for which to register the caller as a
-- worker blocked on the queues (0: it will not block), arg(6) the caller's waiter id ('' when it
-- does not block), arg(6+i) queue i's max deliveries (0: no limit)
-- Returns a list of {queue index, id, data, deliveries, ms leased}, one per item handed out;
-- when there is none: the ms until the next delayed item is due (-1 if none is), or -2 when
-- BUDGET ids were dropped or buried (and none handed out) and the caller should call again.
-- Keeps: an id enters the processing list and gets its lease in the same step, so a leased item
-- is always on the processing list; an id without a data key is dropped, never handed out; an
-- item is never handed out more than max deliveries times.
local BUDGET = 100
local ms, token, once = arg(1), arg(2), arg(3) == '1'
local count, flag, waiter = tonumber(arg(4)), tonumber(arg(5)), arg(6)
local budget = BUDGET
local now = now_ms()
local out = {}
for i = 1, NQ do
  local q = queue_at(i)
  local max = tonumber(arg(6 + i))
  promote(q, now, BUDGET)
  while #out < count and budget > 0 do
    local id = redis.call('LINDEX', q.queue, -1)
    if not id then
      break
    end
    local data = redis.call('GET', q.item .. id)
    if not once then
      -- Pushed first: a processing key of the wrong type fails before anything is written.
      redis.call('LPUSH', q.processing, id)
    end
    redis.call('RPOP', q.queue)
    local taken = take(q, id, data, ms, token, max, once, now)
    if taken then
      out[#out + 1] = taken
    else
      if not once then
        redis.call('LPOP', q.processing)
      end
      budget = budget - 1
    end
  end
  if #out >= count then
    break
  end
end
if waiter ~= '' and (#out > 0 or flag == 0) then
  for i = 1, NQ do
    leave(queue_at(i), waiter, now)
  end
end
if #out > 0 then
  return out
end
if budget <= 0 then
  return -2
end
local soonest = -1
for i = 1, NQ do
  local q = queue_at(i)
  local due = next_due(q, now)
  if due >= 0 and (soonest < 0 or due < soonest) then
    soonest = due
  end
  if flag > 0 then
    redis.call('ZADD', q.waiting, now + flag, waiter)
  end
end
return soonest

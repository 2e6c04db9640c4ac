-- release: give a leased item back before its lease ends (a retryable failure).
--#include queue.lua
--#include events.lua
--#include wake.lua
--#include delay.lua
--#include take.lua
--#include group.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) item_id: the item's id
-- arg(2) token: the lease value the caller holds
-- arg(3) delay_ms: the delay in ms (0: at once)
-- arg(4) max_deliveries: the queue's max deliveries (0: no limit)
-- arg(5) undo: '1' to undo the delivery (the item goes back to the leasing end as if it had not
--   been handed out)
-- arg(6) reason (optional): why the try failed
-- Returns 1 when the item went back to the queue (or to the delayed set), 2 when it had been
-- delivered max times and was buried instead, 0 when the caller does not hold the lease (or the
-- item no longer exists); then nothing changed.
-- Keeps: only the lease holder can release; the item leaves the processing list and enters the
-- main queue, the delayed set or the dead-letter store in the same step; every key the call may
-- write is type-checked before its first write. A grouped item leaves its group's count and
-- goes back to its group's list (or is delayed, or buried, and leaves P:grouped).
local id, held, delay, max, undo, reason = arg(1), arg(2), tonumber(arg(3)), tonumber(arg(4)), arg(5) == '1', arg(6)
local lease = Q.lease .. id
if redis.call('GET', lease) ~= held then
  return 0
end
-- Every key the call may write is checked before its first write.
local data = redis.call('GET', Q.item .. id)
local n = delivered(Q, id)
local delayed = delay > 0 and {Q.delayed} or {}
check_types('list', {Q.queue, Q.processing}, 'hash', {Q.reasons, Q.counts}, 'zset', delayed)
if data and not undo then
  check_types(bury_keys(Q, {id}, {n}, max))
end
check_wake(Q)
check_groups(Q)
local groups, flying = groups_of(Q, {id})
local g = groups[1]
redis.call('DEL', lease)
redis.call('LREM', Q.processing, -1, id)
if g and flying[1] then
  group_done(Q, g, id)
end
if not data then
  forget(Q, id)
  if g then
    redis.call('HDEL', Q.grouped, id)
  end
  return 0
end
if undo then
  if n > 1 then
    redis.call('HSET', Q.deliveries, id, n - 1)
  else
    redis.call('HDEL', Q.deliveries, id)
  end
  requeue(Q, id, true, g or false)
  count(Q, 'retried')
  emit(Q, 'retried', id, n - 1)
  return 1
end
if reason then
  redis.call('HSET', Q.reasons, id, reason)
end
local now = now_ms()
count(Q, 'failed')
emit(Q, 'failed', id, n, reason)
if max > 0 and n >= max then
  bury(Q, id, data, n, reason or redis.call('HGET', Q.reasons, id), now)
  if g then
    redis.call('HDEL', Q.grouped, id)
  end
  return 2
end
if delay > 0 then
  schedule(Q, id, now + delay, now)
else
  requeue(Q, id, false, g or false)
end
count(Q, 'retried')
emit(Q, 'retried', id, n)
return 1

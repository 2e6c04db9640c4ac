-- release: give a leased item back before its lease ends (a retryable failure).
--#include queue.lua
-- arg(1) item id, arg(2) the lease value the caller holds, arg(3) delay in ms (0: at once),
-- arg(4) reason (optional)
-- Returns 1 when the item went back to the queue (or to the delayed set), 2 when it had been
-- delivered max times and was buried instead, 0 when the caller does not hold the lease (or the
-- item no longer exists); then nothing changed.
-- Keeps: only the lease holder can release; the item leaves the processing list and enters the
-- main queue, the delayed set or the dead-letter store in the same step.
guard(Q, 'queue', 'processing', 'deliveries', 'reasons', 'dead', 'delayed')
local id, held, delay, reason = arg(1), arg(2), tonumber(arg(3)), arg(4)
local lease = Q.lease .. id
if redis.call('GET', lease) ~= held then
  return 0
end
local data = redis.call('GET', Q.item .. id)
redis.call('DEL', lease)
redis.call('LREM', Q.processing, -1, id)
if not data then
  forget(Q, id)
  return 0
end
if reason then
  redis.call('HSET', Q.reasons, id, reason)
end
local now, n = now_ms(), delivered(Q, id)
if Q.max > 0 and n >= Q.max then
  bury(Q, id, data, n, reason or redis.call('HGET', Q.reasons, id), now)
  return 2
end
if delay > 0 then
  schedule(Q, id, now + delay, now)
else
  enqueue(Q, id, false)
end
return 1

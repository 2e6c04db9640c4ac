-- release: give a leased item back before its lease ends (a retryable failure).
--#include queue.lua
-- ARGV[4] item id, ARGV[5] lease token, ARGV[6] delay in ms (0: at once), ARGV[7] max
-- deliveries (0: no limit), ARGV[8] reason (optional)
-- Returns 1 when the item went back to the queue (or to the delayed set), 2 when it had been
-- delivered max times and was buried instead, 0 when the caller does not hold the lease (or the
-- item no longer exists); then nothing changed.
-- Keeps: only the lease holder can release; the item leaves the processing list and enters the
-- main queue, the delayed set or the dead-letter store in the same step.
local id, token, delay, max, reason = ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local lease = Q.lease .. id
if redis.call('GET', lease) ~= token then
  return 0
end
local data = redis.call('GET', Q.item .. id)
redis.call('DEL', lease)
redis.call('LREM', Q.processing, -1, id)
if not data then
  forget(id)
  return 0
end
if reason then
  redis.call('HSET', Q.reasons, id, reason)
end
local now = now_ms()
if max > 0 and delivered(id) >= max then
  bury(id, data, delivered(id), reason or redis.call('HGET', Q.reasons, id), now)
  return 2
end
if delay > 0 then
  schedule(id, now + delay, now)
else
  redis.call('LPUSH', Q.queue, id)
end
return 1

-- progress: a leased item's holder reports its progress.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) item_id: the item's id
-- arg(2) token: the lease value the caller holds
-- arg(3) progress: the report (a number or small JSON, as text)
-- Returns 1 when the report was kept, 0 when the caller does not hold the lease (it ran out,
-- another worker holds the item, or it was cancelled): then nothing changed.
-- Keeps: only the holder reports; the report lapses with the lease (its time to live is the
-- lease's time left) and renews nothing. Every key the call may write is type-checked (the lease
-- key by its read) before its first write.
local id, held, value = arg(1), arg(2), arg(3)
local lease, progress = Q.lease .. id, Q.progress .. id
if redis.call('GET', lease) ~= held then
  return 0
end
local left = redis.call('PTTL', lease)
if left <= 0 then
  return 0
end
check_types('string', {progress})
redis.call('SET', progress, value, 'PX', left)
return 1

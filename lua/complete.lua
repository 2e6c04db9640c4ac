-- complete: mark items as done and remove every trace of them.
--#include queue.lua
--#include wake.lua
--#include delay.lua
-- arg(1), arg(2), ... item ids
-- Returns, per id, 1 when this call deleted its data key (it completed the item) and 0 when the
-- item had already been completed (or had expired).
-- Keeps: exactly one call returns 1 per item; no bookkeeping of an item is left behind. The id is
-- looked for near the oldest end of the processing list first (completing in lease order), then
-- from the newest end (short jobs among long ones), so neither pattern scans the whole list.
local NEAR = 64
local done, ids, leases = {}, {}, {}
for i = NQ + 1, #ARGV do
  local id = ARGV[i]
  -- The first read of the processing list also fails, before any write, on a key of the wrong
  -- type.
  local near = redis.call('LPOS', Q.processing, id, 'RANK', -1, 'MAXLEN', NEAR)
  done[#done + 1] = redis.call('DEL', Q.item .. id)
  redis.call('LREM', Q.processing, near and -1 or 1, id)
  ids[#ids + 1] = id
  leases[#leases + 1] = Q.lease .. id
end
-- The leases, delays and bookkeeping of all the items at once.
local held = redis.call('MGET', unpack(leases))
local delayed = {}
for j, value in ipairs(held) do
  if value == DELAY_TOKEN then
    delayed[#delayed + 1] = ids[j]
  end
end
if #delayed > 0 then
  redis.call('ZREM', Q.delayed, unpack(delayed))
end
redis.call('DEL', unpack(leases))
redis.call('HDEL', Q.deliveries, unpack(ids))
redis.call('HDEL', Q.reasons, unpack(ids))
return done

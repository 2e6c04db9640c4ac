-- complete_held: complete items, each only while the caller still holds its lease.
--#include queue.lua
-- arg(1), arg(2), ... pairs of an item id and the lease value (token@ms) its lease was given
-- Returns, per pair, 1 when this call completed the item and 0 when it did not: the lease is not
-- the caller's any more (it expired, or another worker holds the item now) or the item was
-- completed already. Nothing changes for an item the caller does not hold.
-- Keeps: a caller never removes an item it does not hold, so a late or repeated call cannot take
-- away work that another worker is doing, nor an item added again under the same id; no
-- bookkeeping of a completed item is left behind.
redis.call('LLEN', Q.processing)
local done = {}
for i = NQ + 1, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local lease = Q.lease .. id
  if redis.call('GET', lease) == token then
    done[#done + 1] = redis.call('DEL', Q.item .. id)
    redis.call('LREM', Q.processing, -1, id)
    redis.call('DEL', lease)
    forget(Q, id)
  else
    done[#done + 1] = 0
  end
end
return done

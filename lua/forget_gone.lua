-- forget_gone: last step of the deep clean; drop the bookkeeping of items that no longer exist
-- (completed by a client of another implementation, or expired).
--#include queue.lua
-- arg(1), arg(2), ... ids that have a delivery count or a reason
-- Returns how many ids were forgotten.
-- Keeps: the bookkeeping of an existing item is never touched.
redis.call('HLEN', Q.deliveries)
redis.call('HLEN', Q.reasons)
local gone = 0
for i = NQ + 1, #ARGV do
  local id = ARGV[i]
  if redis.call('EXISTS', Q.item .. id) == 0 then
    forget(Q, id)
    gone = gone + 1
  end
end
return gone

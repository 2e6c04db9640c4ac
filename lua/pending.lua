-- pending: read a page of the processing list: the leased items and their leases.
--#include queue.lua
-- arg(1) first index, arg(2) last index, as LRANGE indexes of the processing list
-- Returns the list's {id, deliveries, lease value, lease ms left} in list order (newest lease
-- first); the lease value is nil and the time left negative when the lease is gone (expired and
-- awaiting a clean).
-- Keeps: read only.
local ids = redis.call('LRANGE', Q.processing, arg(1), arg(2))
local out = {}
for _, id in ipairs(ids) do
  local lease = Q.lease .. id
  out[#out + 1] = {id, delivered(Q, id), redis.call('GET', lease), redis.call('PTTL', lease)}
end
return out

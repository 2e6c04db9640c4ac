-- pending: read a page of the processing list: the leased items and their leases.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the first index, as an LRANGE index of the processing list
-- arg(2) last: the last index
-- Returns the list's {id, deliveries, lease value, lease ms left} in list order (newest lease
-- first); the lease value is nil and the time left negative when the lease is gone (expired and
-- awaiting a clean). Entries of completed items (no lease, no data key), left for the light clean
-- to drop, are skipped.
-- Keeps: read only.
local ids = redis.call('LRANGE', Q.processing, arg(1), arg(2))
local out = {}
for _, id in ipairs(ids) do
  local lease = Q.lease .. id
  local held = redis.call('GET', lease)
  if held or redis.call('EXISTS', Q.item .. id) == 1 then
    out[#out + 1] = {id, delivered(Q, id), held, redis.call('PTTL', lease)}
  end
end
return out

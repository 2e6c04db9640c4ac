-- unleased: first step of the deep clean; keep the ids that are items without any lease.
--#include queue.lua
-- arg(1), arg(2), ... candidate ids
-- Returns the candidate ids whose data key exists and whose lease key does not.
-- Keeps: read only. Delayed items hold a lease key, so they are never candidates.
local found = {}
for i = 4 * NQ + 1, #ARGV do
  local id = ARGV[i]
  if redis.call('EXISTS', Q.item .. id) == 1 and redis.call('EXISTS', Q.lease .. id) == 0 then
    found[#found + 1] = id
  end
end
return found

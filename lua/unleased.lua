-- unleased: first step of the deep clean; keep the ids that are items without a live lease.
-- KEYS[1] main queue (declared so the call is routed to the queue's slot; not touched)
-- ARGV[1] item-key prefix, ARGV[2] lease-key prefix, ARGV[3..] candidate ids
-- Returns the candidate ids whose data key exists and whose lease key does not.
-- Keeps: read only.
local found = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('EXISTS', ARGV[1] .. id) == 1 and redis.call('EXISTS', ARGV[2] .. id) == 0 then
    found[#found + 1] = id
  end
end
return found

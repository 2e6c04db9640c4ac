-- purge_dead: delete dead letters for good.
--#include queue.lua
--#include dead.lua
-- arg(1)... as dead.lua
-- Returns {purged, skipped}: how many dead letters were deleted, and how many chosen ids were not
-- dead letters.
-- Keeps: live items are never touched.
redis.call('ZCARD', Q.dead)
local purged, skipped = 0, 0
for _, id in ipairs(chosen_dead()) do
  local gone = redis.call('DEL', Q.dead_item .. id)
  redis.call('ZREM', Q.dead, id)
  purged = purged + gone
  skipped = skipped + 1 - gone
end
return {purged, skipped}

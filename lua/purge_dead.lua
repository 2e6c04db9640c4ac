-- purge_dead: delete dead letters for good.
--#include queue.lua
--#include dead.lua
-- ARGV[4..] as dead.lua
-- Returns how many dead letters were deleted.
-- Keeps: live items are never touched.
local purged = 0
for _, id in ipairs(chosen_dead()) do
  purged = purged + redis.call('DEL', Q.dead_item .. id)
  redis.call('ZREM', Q.dead, id)
end
return purged

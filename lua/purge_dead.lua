-- purge_dead: delete dead letters for good.
--#include queue.lua
--#include dead.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) which: 'oldest' or 'ids' (see dead.lua)
-- arg(2...) chosen: with 'oldest', how many of the oldest dead letters, then how many of the
--   oldest to pass over (optional, 0); with 'ids', the ids
-- Returns {purged, skipped}: how many dead letters were deleted, and how many chosen ids were not
-- dead letters.
-- Keeps: live items are never touched; every key the call may write is type-checked before its
-- first write.
local ids = chosen_dead()
local letters = {}
for i, id in ipairs(ids) do
  letters[i] = Q.dead_item .. id
end
-- Every key the call may write is checked before its first write.
check_types('zset', {Q.dead}, 'hash', letters)
local purged, skipped = 0, 0
for i, id in ipairs(ids) do
  local gone = redis.call('DEL', letters[i])
  redis.call('ZREM', Q.dead, id)
  purged = purged + gone
  skipped = skipped + 1 - gone
end
return {purged, skipped}

-- dead: picks the dead letters an operation applies to: arg(1) 'oldest' then arg(2) a count and,
-- optionally, arg(3) how many of the oldest to pass over (the count oldest dead letters after
-- those), or arg(1) 'ids' then arg(2), arg(3), ... the ids.
--#include queue.lua
-- Keys: P:dead (read only).
-- Defines: chosen_dead, which returns the ids chosen.
-- Keeps: read only.
local function chosen_dead()
  if arg(1) == 'oldest' then
    local first = tonumber(arg(3) or 0)
    return redis.call('ZRANGE', Q.dead, first, first + tonumber(arg(2)) - 1)
  end
  local ids = {}
  for i = NQ + 2, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
  return ids
end

-- dead: picks the dead letters an operation applies to.
-- ARGV[4] 'oldest' then ARGV[5] a count: the count oldest dead letters; or ARGV[4] 'ids' then
-- ARGV[5..] the ids.
local function chosen_dead()
  if ARGV[4] == 'oldest' then
    return redis.call('ZRANGE', Q.dead, 0, tonumber(ARGV[5]) - 1)
  end
  local ids = {}
  for i = 5, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
  return ids
end

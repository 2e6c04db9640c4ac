-- deep_clean_walk: one step of the deep clean's forward walk of the main queue (or of a group's
-- list), from its head.
--#include queue.lua
--#include hold.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the index of the first entry to read
-- arg(2) count: how many entries to read
-- arg(3) token: the run's token, or '' to only read
-- arg(4) group (optional): the group whose list to walk (see group.lua), instead of the main queue
-- Returns {microseconds this call held Redis, entries read, {ids}}: without a token, the ids
-- read; with one, the ids read that this run holds, whose holds this call removed.
-- Keeps: a held id that is on the main queue loses its hold in the same step as it is seen there,
-- so it is an ordinary queued item again and the run leaves it alone. The main queue changes only
-- at its ends (pushes at the head and, for "next", at the tail; pops at the tail), so a walk at
-- increasing indexes sees every id that stays on it throughout the walk; a held id cannot enter
-- it; so a held id this walk never saw is not on the main queue at its end, nor after. So for a
-- group's list, which changes the same way.
local first, how_many, run = tonumber(arg(1)), tonumber(arg(2)), arg(3)
local list = arg(4) and Q.group .. arg(4) or Q.queue
local ids = redis.pcall('LRANGE', list, first, first + how_many - 1)
if ids.err then
  -- A group list of another type holds no item of this queue (its ids are read as none).
  check_types('list', {Q.queue})
  ids = {}
end
if run == '' then
  return {elapsed(), #ids, ids}
end
local hold = HOLD_PREFIX .. run
local keys = {}
for j, id in ipairs(ids) do
  keys[j] = Q.lease .. id
end
local values = {}
for j = 1, #keys, 1000 do
  local got = redis.call('MGET', unpack(keys, j, math.min(j + 999, #keys)))
  for k = 1, #got do
    values[j + k - 1] = got[k]
  end
end
local released = {}
for j, id in ipairs(ids) do
  if values[j] == hold then
    redis.call('DEL', keys[j])
    released[#released + 1] = id
  end
end
return {elapsed(), #ids, released}

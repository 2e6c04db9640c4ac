-- deep_clean_walk: one step of the deep clean's forward walk of the main queue (or of a group's
-- list), from its head.
--#include queue.lua
--#include hold.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the index of the first entry to read, as the walk's previous step left it
-- arg(2) count: how many entries to read
-- arg(3) removals: the count of removals from inside the main queue (P:removals) that the walk's
--   previous step returned, or '' for its first step
-- arg(4) token: the run's token, or '' to only read
-- arg(5) group (optional): the group whose list to walk (see group.lua), instead of the main queue
-- Returns {microseconds this call held Redis, entries read, {ids}, the index read from, removals
-- now}: without a token, the ids read; with one, the ids read that this run holds, whose holds
-- this call removed. The walk's next step reads from the index read from plus the entries read.
-- Keeps: a held id that is on the main queue loses its hold in the same step as it is seen there,
-- so it is an ordinary queued item again and the run leaves it alone. The main queue is pushed
-- at its ends (at the head and, for "next", at the tail) and popped at its tail, which moves no
-- entry towards the head; only a removal from inside it (a cancel or a reschedule, which count
-- it in P:removals) does, by one place. So an id that was at or past the walk's index after its
-- previous step is now at or past that index less the removals since, where this step reads
-- from (from the head when the count went back: the key was deleted): a walk sees every id that
-- stays on the list throughout the walk; a held id cannot enter it; so a held id this walk never
-- saw is not on the main queue at its end, nor after. So for a group's list, which changes only
-- at its ends.
local first, how_many, before, run = tonumber(arg(1)), tonumber(arg(2)), arg(3), arg(4)
local list = arg(5) and Q.group .. arg(5) or Q.queue
local removals = 0
if not arg(5) then
  -- A count of another type reads as none: a cancel or a reschedule fails on it, removing nothing.
  removals = tonumber(redis.pcall('GET', Q.removals)) or 0
  if before ~= '' then
    local moved = removals - tonumber(before)
    first = moved < 0 and 0 or math.max(first - moved, 0)
  end
end
local ids = redis.pcall('LRANGE', list, first, first + how_many - 1)
if ids.err then
  -- A group list of another type holds no item of this queue (its ids are read as none).
  check_types('list', {Q.queue})
  ids = {}
end
if run == '' then
  return {elapsed(), #ids, ids, first, removals}
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
return {elapsed(), #ids, released, first, removals}

-- snapshot: read one page of one part of a queue for an audit, without changing anything.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) part: 'queue' (main queue), 'processing' (processing list), 'delayed', 'dead' or 'ids'
-- arg(2) max_bytes: the most bytes of data to return (the first entry is always read whatever
--   its size)
-- arg(3...) entries: for 'queue' and 'processing', the first and last position counted from the
--   oldest end of the list (0 is the next id to be leased, or the oldest lease); for 'delayed'
--   and 'dead', the first and last rank (soonest due, or longest dead, first); for 'ids', the
--   item ids
-- Returns {examined, rows}: how many entries of the page were looked at, oldest first (fewer than
-- asked when the byte budget ran out), and a row {id, data, deliveries, lease ms left (-1: none),
-- last failure reason (nil: none)} for each of them that is an item of that part. Ids whose item
-- is gone, and stray queue entries of an item that is leased, have no row.
-- Keeps: read only.
local part, budget = arg(1), tonumber(arg(2))
local entries, order = {}, 1
if part == 'queue' or part == 'processing' then
  local key = part == 'queue' and Q.queue or Q.processing
  -- Position p is list index -(p + 1): LRANGE gives the page newest first, read it backwards.
  entries = redis.call('LRANGE', key, -(tonumber(arg(4)) + 1), -(tonumber(arg(3)) + 1))
  order = -1
elseif part == 'delayed' or part == 'dead' then
  entries = redis.call('ZRANGE', part == 'delayed' and Q.delayed or Q.dead, arg(3), arg(4))
else
  for i = NQ + 3, #ARGV do
    entries[#entries + 1] = ARGV[i]
  end
end

local function row(id)
  if part == 'dead' then
    local h = redis.call('HMGET', Q.dead_item .. id, 'data', 'deliveries', 'reason')
    if not h[1] then
      return nil
    end
    return {id, h[1], tonumber(h[2] or '0'), -1, h[3] or false}
  end
  local data = redis.call('GET', Q.item .. id)
  if not data then
    return nil
  end
  local left = -1
  if part ~= 'delayed' then
    left = redis.call('PTTL', Q.lease .. id)
    if part == 'queue' and left ~= -2 then
      return nil
    end
    left = math.max(left, -1)
  end
  return {id, data, delivered(Q, id), left, redis.call('HGET', Q.reasons, id) or false}
end

local rows, examined, size = {}, 0, 0
local first, last = 1, #entries
if order < 0 then
  first, last = #entries, 1
end
for i = first, last, order do
  examined = examined + 1
  local r = row(entries[i])
  if r then
    rows[#rows + 1] = r
    size = size + #r[2]
  end
  if size >= budget then
    break
  end
end
return {examined, rows}

-- delayed: read a page of the delayed items, soonest due first, without taking anything.
--#include queue.lua
--#include preview.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the first index, as a ZRANGE index of the delayed set (0: soonest due)
-- arg(2) last: the last index
-- arg(3) preview: the most bytes of each item's data to return, or -1 for the whole data
-- Returns {number of delayed items, {id, due ms, data, size}, ...}: the page in due order, with
-- each item's due time (ms since the epoch), its data (its first arg(3) bytes at most) and the
-- length of its whole data (data and size are nil for an id whose item is gone).
-- Keeps: read only; a preview reads no byte of a value beyond its bound (GETRANGE).
local rows = redis.call('ZRANGE', Q.delayed, arg(1), arg(2), 'WITHSCORES')
local bound = tonumber(arg(3))
local out = {redis.call('ZCARD', Q.delayed)}
for i = 1, #rows, 2 do
  local id, due = rows[i], rows[i + 1]
  local key = Q.item .. id
  local data, size = preview(key, bound)
  out[#out + 1] = {id, due, data, size}
end
return out

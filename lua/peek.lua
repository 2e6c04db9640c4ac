-- peek: read a page of the main queue without taking anything.
--#include queue.lua
--#include preview.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the first index, as an LRANGE index of the main queue list
-- arg(2) last: the last index
-- arg(3) preview: the most bytes of each item's data to return, or -1 for the whole data
-- Returns {length of the main queue, {id, data, size}, ...}: the page in list order (both without
-- wake-up entries: an empty id with no item of that id), with each
-- item's data (its first arg(3) bytes at most) and the length of its whole data (data and size
-- are nil for an id whose item is gone).
-- Keeps: read only; a preview reads no byte of a value beyond its bound (GETRANGE).
local first, last = tonumber(arg(1)), tonumber(arg(2))
-- A wake-up entry (wakeups in queue.lua) is no item: it is not listed nor counted, and indexes
-- from the old end count past it.
local wakes = wakeups(Q)
if wakes == 1 then
  first = first < 0 and first - 1 or first
  last = last < 0 and last - 1 or last
end
local ids = redis.call('LRANGE', Q.queue, first, last)
local bound = tonumber(arg(3))
local out = {redis.call('LLEN', Q.queue) - wakes}
local empty_item = redis.call('EXISTS', Q.item)
for _, id in ipairs(ids) do
  if id ~= '' or empty_item == 1 then
    local key = Q.item .. id
    local data, size = preview(key, bound)
    out[#out + 1] = {id, data, size}
  end
end
return out

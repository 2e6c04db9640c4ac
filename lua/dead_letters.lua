-- dead_letters: read one page of the dead-letter store, oldest first.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) first: the first index
-- arg(2) last: the last index (inclusive; negative counts from the newest)
-- arg(3) preview: the most bytes of each dead letter's data to return, or -1 for the whole data
-- Returns a list of {id, data, deliveries, reason, ms buried, size}: data is the first arg(3)
-- bytes at most, size the length of the whole data.
-- Keeps: read only; a preview sends no byte of a value beyond its bound to the client. A hash
-- field has no GETRANGE: a longer one is cut here, and the memory of the copy given back at once.
local page = redis.call('ZRANGE', Q.dead, arg(1), arg(2), 'WITHSCORES')
local bound = tonumber(arg(3))
local out = {}
for i = 1, #page, 2 do
  local id = page[i]
  local key = Q.dead_item .. id
  local h = redis.call('HMGET', key, 'deliveries', 'reason')
  local data, size
  if bound < 0 then
    data = redis.call('HGET', key, 'data') or ''
    size = #data
  else
    size = redis.call('HSTRLEN', key, 'data')
    if size <= bound then
      data = redis.call('HGET', key, 'data') or ''
    elseif bound == 0 then
      data = ''
    else
      data = string.sub(redis.call('HGET', key, 'data'), 1, bound)
      collectgarbage('collect')
    end
  end
  out[#out + 1] = {id, data, tonumber(h[1] or '0'), h[2] or '', tonumber(page[i + 1]), size}
end
return out

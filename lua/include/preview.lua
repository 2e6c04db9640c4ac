-- preview: an item's data for a listing, read no further than a bound (peek.lua, delayed.lua).
-- Keys: P:item:<id> (read).
-- Defines: preview.
-- Keeps: read only; a preview reads no byte of a value beyond its bound (GETRANGE).

-- The data of the item at key (its first bound bytes at most; all of it when bound < 0) and the
-- length of its whole data; both nil when the item is gone.
local function preview(key, bound)
  local data, size
  if bound < 0 then
    data = redis.call('GET', key)
    return data, data and #data
  end
  size = redis.call('STRLEN', key)
  if size <= bound then
    data = redis.call('GET', key) -- whole (nil when the item is gone)
    return data, data and size
  elseif bound == 0 then
    return '', size
  end
  return redis.call('GETRANGE', key, 0, bound - 1), size
end

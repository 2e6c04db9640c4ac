-- take: shared by lease and claim. Hands out one id that already sits at the head of the
-- processing list, or says why it cannot.
-- Uses ARGV[1] item-key prefix, ARGV[2] lease-key prefix, ARGV[3] lease length in ms,
-- ARGV[4] lease token of the caller's script.
-- take(id) returns {id, data} after writing the lease, or nil when the id is not an item any more
-- (no data key) or is a stray copy of an item whose lease is live; the caller then removes the
-- id it pushed, so nothing is left behind.
local function take(id)
  local data = redis.call('GET', ARGV[1] .. id)
  if not data then
    return nil
  end
  local lease_key = ARGV[2] .. id
  if redis.call('EXISTS', lease_key) == 1 then
    return nil
  end
  redis.call('SET', lease_key, ARGV[4], 'PX', ARGV[3])
  return {id, data}
end

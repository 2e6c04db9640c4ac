-- claim: hand out an id that a blocking BRPOPLPUSH has just moved onto the processing list.
--#include queue.lua
--#include wake.lua
--#include take.lua
--#include rate.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) lease_ms: the lease length in ms
-- arg(2) token: the lease token
-- arg(3) once: '1' to hand the item out at most once
-- arg(4) moved: the id that was moved
-- arg(5) waiter: the caller's waiter id
-- arg(6) max_deliveries: the queue's max deliveries (0: no limit)
-- Returns {1 (the queue's index), id, data, deliveries, ms leased}, as lease.lua replies; or 0
-- when the id cannot be handed out: a cleaner already gave it back to the main queue (it is no
-- longer on the processing list), it is no longer an item, it is a stray copy of a leased item,
-- or it was buried; or the queue's rate limit (rate.lua) holds it back (the id goes back to the
-- leasing end of the main queue, and the lease that follows is told its turn).
-- Keeps: every key the call may write is type-checked before its first write (a lease key of
-- another type reads as held by another worker); a wrong type fails the call with the move
-- undone. An id is leased only while it is on the processing list, so a cleaner that requeued it
-- between the move and this claim cannot make it both queued and leased. A worker that dies
-- before the claim leaves an id on the processing list without a lease: the next light clean
-- requeues it.
local ms, token, once, id, waiter = arg(1), arg(2), arg(3) == '1', arg(4), arg(5)
local max = tonumber(arg(6))
if not redis.call('LPOS', Q.processing, id) then
  return 0
end
-- Every key the call may write is checked before its first write. The queue's own keys were
-- checked by the lease call before the move; when the item's keys are of the wrong type, the move
-- is undone (the id goes back to the end of the main queue it was taken from) before the error.
check_types('list', {Q.queue}, 'hash', {Q.deliveries, Q.reasons})
if waiter ~= '' then
  check_types('zset', {Q.waiting}, 'list', {Q.wake})
end
local rate = rate_read(Q, waiter)
local data = redis.pcall('GET', Q.item .. id)
local err
if type(data) == 'table' then
  err = 'WRONGTYPE ' .. Q.item .. id .. ' is not a string'
else
  local counts = max > 0 and {redis.call('HGET', Q.deliveries, id)} or {}
  err = wrong_type(bury_keys(Q, {id}, counts, max))
end
local now = now_ms()
if err or rate_allow(rate, now, 1, true) == 0 then
  redis.call('LREM', Q.processing, 1, id)
  redis.call('RPUSH', Q.queue, id)
  if waiter ~= '' then
    leave(Q, waiter, now)
  end
  if err then
    error(err, 0)
  end
  return 0
end
local n = take(Q, id, data, ms, token .. '@' .. now, max, once, now)
if n then
  rate_spend(Q, rate, now, 1, nil)
  if waiter ~= '' then
    leave(Q, waiter, now)
  end
  if once then
    redis.call('LREM', Q.processing, 1, id)
  end
  return {1, id, data, n, now}
end
-- Remove the entry the move made, but never the only entry of an item that another worker has
-- leased since (a clean requeued the id before this claim, and that worker leased it).
if redis.call('EXISTS', Q.item .. id) == 0 or #redis.call('LPOS', Q.processing, id, 'COUNT', 2) > 1 then
  redis.call('LREM', Q.processing, 1, id)
end
return 0

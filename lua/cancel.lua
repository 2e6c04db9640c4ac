-- cancel: cancel one item by id: a waiting or delayed item is removed, a leased one is marked.
--#include queue.lua
--#include events.lua
--#include hold.lua
--#include cancelled.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) item_id: the item's id
-- Returns 1 when the item was waiting (queued, delayed, or leased with its lease run out) and is
-- removed; 2 when it is leased: it is removed and its lease is marked, so that its holder's next
-- renewal reports the cancellation (renew.lua); 0 when there is no such item (dead, done or never
-- added): nothing changed.
-- Keeps: the item's data key goes in the same step, so no client of any implementation hands it
-- out again (each drops an id without data); its bookkeeping goes too, and it is counted as
-- cancelled. The main queue is looked at near both of its ends only (NEAR entries each): an id
-- found there is removed, one further in stays for the next lease to drop, so a cancel never
-- scans the queue; a removal is counted in P:removals, so that a deep clean's walk of the queue
-- steps back over the place it moved the ids behind it by (deep_clean_walk.lua). A marked lease
-- keeps its time to live; the processing list's entry is left to the light clean (an entry
-- without data is dropped). Every key the call may write is type-checked before its first write.
local NEAR = '1000'
local id = arg(1)
local item, lease = Q.item .. id, Q.lease .. id
check_types('string', {item, lease})
if SIZES[item] == 0 and redis.call('EXISTS', item) == 0 then
  return 0
end
check_types('list', {Q.queue}, 'string', {Q.removals}, 'zset', {Q.delayed}, 'hash',
  {Q.deliveries, Q.reasons, Q.counts})
local held = redis.call('GET', lease)
local delivery = delivery_of(Q, id)
local outcome = 1
if held == DELAY_TOKEN or (not held and redis.call('ZSCORE', Q.delayed, id)) then
  redis.call('ZREM', Q.delayed, id)
  redis.call('DEL', lease)
elseif held and not is_hold(held) then
  if string.sub(held, 1, #CANCEL_PREFIX) ~= CANCEL_PREFIX then
    redis.call('SET', lease, CANCEL_PREFIX .. held, 'KEEPTTL')
  end
  outcome = 2
elseif not held then
  local removed = 0
  if redis.call('LPOS', Q.queue, id, 'RANK', '-1', 'MAXLEN', NEAR) then
    removed = redis.call('LREM', Q.queue, '-1', id)
  elseif redis.call('LPOS', Q.queue, id, 'MAXLEN', NEAR) then
    removed = redis.call('LREM', Q.queue, '1', id)
  end
  if removed > 0 then
    redis.call('INCR', Q.removals)
  end
end
redis.call('DEL', item)
forget(Q, id)
count(Q, 'cancelled')
emit(Q, 'cancelled', id, delivery)
return outcome

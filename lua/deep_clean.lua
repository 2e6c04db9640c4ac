-- deep_clean: last step of the deep clean's recovery: queue the held items found in neither list.
--#include queue.lua
--#include events.lua
--#include wake.lua
--#include hold.lua
--#include group.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) token: the run's token
-- arg(2...) ids: the ids this run held that its second walk of the main queue (and of the group
--   lists) did not see
-- Called after the run's pass over the processing list.
-- Returns {microseconds this call held Redis, {ids requeued}}.
-- Keeps: an id still held by this run is in neither list: not on the main queue (the walk did not
-- see it, and a held id cannot enter it), and not on the processing list (the run's light-clean
-- pass made as many pops from its tail as it had entries after the walk, nothing is pushed
-- between an entry and the tail, and a light clean that pops a held id removes the hold). So the
-- item is pushed once, and never one that is leased or delayed: a lease taken since replaced the
-- hold. A grouped item goes back to its group's list (group.lua). A held item that no longer
-- exists only loses its hold and bookkeeping. Every key that may
-- be written is read first: a key of the wrong type fails the call before anything is written.
local hold = HOLD_PREFIX .. arg(1)
check_types('list', {Q.queue, Q.wake}, 'hash', {Q.deliveries, Q.reasons, Q.counts})
check_wake(Q)
check_groups(Q)
local mine = {}
for i = NQ + 2, #ARGV do
  local id = ARGV[i]
  if redis.call('GET', Q.lease .. id) == hold then
    mine[#mine + 1] = {id, is_data(Q.item .. id)}
  end
end
local ids = {}
for k, held in ipairs(mine) do
  ids[k] = held[1]
end
local groups, flying = groups_of(Q, ids)
local requeued, back = {}, {}
for k, held in ipairs(mine) do
  local id = held[1]
  redis.call('DEL', Q.lease .. id)
  if held[2] then
    requeued[#requeued + 1] = id
    local delivery = delivery_of(Q, id)
    if groups[k] then
      if flying[k] then
        group_done(Q, groups[k], id)
      end
      group_push(Q, groups[k], id, false)
    else
      back[#back + 1] = id
    end
    emit(Q, 'expired', id, delivery, 'lease expired')
    emit(Q, 'retried', id, delivery)
  else
    forget(Q, id)
    if groups[k] then
      redis.call('HDEL', Q.grouped, id)
      if flying[k] then
        group_done(Q, groups[k])
      end
    end
  end
end
for i = 1, #back, 1000 do
  redis.call('LPUSH', Q.queue, unpack(back, i, math.min(i + 999, #back)))
end
if #back > 0 then
  wake(Q, #back)
end
count(Q, 'expired', #requeued)
count(Q, 'retried', #requeued)
return {elapsed(), requeued}

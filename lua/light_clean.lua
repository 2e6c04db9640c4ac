-- light_clean: one bounded step of the light clean, over the oldest end of the processing list.
--#include queue.lua
--#include events.lua
--#include wake.lua
--#include delay.lua
--#include take.lua
--#include hold.lua
--#include group.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) budget: the most ids to examine
-- arg(2) max_deliveries: the queue's max deliveries (0: no limit)
-- arg(3) due: the most due delayed items to promote
-- Returns {examined, requeued, dropped, buried, promoted, microseconds this call held Redis}.
-- Due delayed items are moved onto the main queue first, and lapsed registrations of blocked
-- workers are dropped. Up to arg(1) ids are then taken from the tail of the processing list, each
-- one: dropped when its data key is gone (a completed item) or when it is a second entry of an id
-- met earlier in this step; pushed back onto the head of the processing list when its lease is
-- live; otherwise (its lease expired, its worker died before taking the lease, or it is held by a
-- deep clean) buried when it has been delivered max times, else pushed onto the main queue.
-- Repeated calls rotate through the whole list in its own order: the list is only ever pushed at
-- its head, so n pops from the tail (by any light clean) reach every id that was within n of it.
-- A grouped item (group.lua) leaves its group's count and is requeued onto its group's list.
-- Keeps: an item with a live lease is never requeued, and a requeued id leaves the processing
-- list in the same step, so it is never both queued and leased. Every key that may be written is
-- read first: a key of the wrong type fails the call before anything is written.
local budget, max, due = tonumber(arg(1)), tonumber(arg(2)), tonumber(arg(3))
check_types('list', {Q.queue, Q.wake}, 'hash', {Q.deliveries, Q.reasons, Q.counts},
  'zset', {Q.dead, Q.delayed, Q.waiting})
check_groups(Q)
local ids = redis.call('LRANGE', Q.processing, -budget, -1)
local groups, flying = groups_of(Q, ids)
local data, leases = {}, {}
for i = #ids, 1, -1 do
  data[i] = redis.call('GET', Q.item .. ids[i])
  leases[i] = redis.call('GET', Q.lease .. ids[i])
end
local now = now_ms()
local promoted = promote(Q, now, due)
leave(Q, '', now)
if #ids > 0 then
  redis.call('RPOP', Q.processing, #ids)
end
local dropped, buried = 0, 0
local seen, live, back, regrouped = {}, {}, {}, 0
for i = #ids, 1, -1 do
  local id = ids[i]
  local g = not seen[id] and groups[i]
  local flew = g and flying[i]
  if seen[id] then
    dropped = dropped + 1
  elseif not data[i] then
    forget(Q, id)
    if g then
      -- Its data lapsed (a time to live) while it was in flight.
      redis.call('HDEL', Q.grouped, id)
      if flew then
        group_done(Q, g)
      end
    end
    dropped = dropped + 1
  elseif leases[i] and not is_hold(leases[i]) then
    live[#live + 1] = id
  else
    if leases[i] then
      redis.call('DEL', Q.lease .. id)
    end
    local n = delivered(Q, id)
    if max > 0 and n >= max then
      emit(Q, 'expired', id, n, 'lease expired')
      bury(Q, id, data[i], n, 'lease expired', now)
      buried = buried + 1
      if g then
        redis.call('HDEL', Q.grouped, id)
        if flew then
          group_done(Q, g)
        end
      end
    else
      if n > 0 then
        redis.call('HSET', Q.reasons, id, 'lease expired')
      end
      if g then
        if flew then
          group_done(Q, g, id)
        end
        group_push(Q, g, id, false)
        regrouped = regrouped + 1
      else
        back[#back + 1] = id
      end
      emit(Q, 'expired', id, n, 'lease expired')
      emit(Q, 'retried', id, n)
    end
  end
  seen[id] = true
end
for i = 1, #live, 1000 do
  redis.call('LPUSH', Q.processing, unpack(live, i, math.min(i + 999, #live)))
end
for i = 1, #back, 1000 do
  redis.call('LPUSH', Q.queue, unpack(back, i, math.min(i + 999, #back)))
end
if #back > 0 then
  wake(Q, #back)
end
count(Q, 'expired', #back + regrouped + buried)
count(Q, 'retried', #back + regrouped)
return {#ids, #back + regrouped, dropped, buried, promoted, elapsed()}

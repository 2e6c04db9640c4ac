-- complete_held: complete items, each only while the caller still holds its lease.
--#include queue.lua
--#include events.lua
--#include wake.lua
--#include group.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1...) held: an item's id and the lease value (token@ms) its lease was given, for each item
-- Returns, per pair, 1 when this call completed the item and 0 when it did not: the lease is not
-- the caller's any more (it expired, or another worker holds the item now) or the item was
-- completed already. Nothing changes for an item the caller does not hold.
-- Keeps: a caller never removes an item it does not hold, so a late or repeated call cannot take
-- away work that another worker is doing, nor an item added again under the same id; no
-- bookkeeping of a completed item is left behind (a grouped item leaves its group's count, see
-- group.lua); every key the call may write is type-checked before its first write.
local ids, tokens, leases = {}, {}, {}
for i = NQ + 1, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  tokens[#tokens + 1] = ARGV[i + 1]
  leases[#leases + 1] = Q.lease .. ARGV[i]
end
if #ids == 0 then
  return {}
end
-- Which leases the caller holds (a lease key of another type reads as none: not held), then every
-- key the call may write is checked before its first write.
local values = redis.call('MGET', unpack(leases))
local items = {}
for j, id in ipairs(ids) do
  if values[j] == tokens[j] then
    items[#items + 1] = Q.item .. id
  end
end
check_types('list', {Q.processing}, 'hash', {Q.deliveries, Q.reasons, Q.counts}, 'string', items)
check_groups(Q)
local groups, flying = groups_of(Q, ids)
if SIZES[Q.grouped] > 0 then
  check_types('list', {Q.queue})
  check_wake(Q)
end
local done, completed = {}, 0
for j, id in ipairs(ids) do
  -- A lease read above may be gone by now only if an earlier pair of this call completed it.
  if values[j] == tokens[j] and redis.call('GET', leases[j]) == tokens[j] then
    done[j] = redis.call('DEL', Q.item .. id)
    completed = completed + done[j]
    redis.call('LREM', Q.processing, -1, id)
    redis.call('DEL', leases[j])
    local delivery = done[j] == 1 and delivery_of(Q, id)
    forget(Q, id)
    if groups[j] then
      redis.call('HDEL', Q.grouped, id)
      if flying[j] then
        group_done(Q, groups[j])
      end
    end
    if done[j] == 1 then
      emit(Q, 'completed', id, delivery)
    end
  else
    done[j] = 0
  end
end
count(Q, 'completed', completed)
return done

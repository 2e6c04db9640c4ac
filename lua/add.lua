-- add: add items, each unless its id exists already (or without that check).
--#include queue.lua
--#include events.lua
--#include wake.lua
--#include delay.lua
--#include group.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) skip_check: '1' to skip the existence check ('p': skip it, for one item queued on a
--   caller's pipeline), '0' to add only items whose ids are new
-- arg(2) delay_ms: the delay in ms (0: none)
-- arg(3) due_ms: the due time in ms since the epoch (0: none; wins over the delay)
-- arg(4) ttl_ms: the time to live in ms (0: none)
-- arg(5) grouped: '1' when each item comes with its group (an id, its data and its group, ''
--   for none), '0' when it comes without (an id and its data)
-- arg(6...) items: an id and its data (and its group), for each item
-- Returns, per item, 1 when it was added and 0 when its id existed already (nothing changed);
-- with 'p', a plain 1, as the reference client's SET replies on a pipeline.
-- Keeps: the data keys are written before the ids are pushed; an existing item is never queued
-- a second time (unless the check is skipped); a new item starts without bookkeeping (a count
-- left by a client of another implementation is dropped); a delayed item holds a delay lease,
-- so no cleaner queues it early; every key the call may write is type-checked before its first
-- write. A grouped item waits on its group's list (group.lua), and P:grouped names its group.
-- overwrite: no existence check (an existing item's data is replaced and its id queued again).
local overwrite = arg(1) ~= '0'
local delay, at, ttl = tonumber(arg(2)), tonumber(arg(3)), tonumber(arg(4))
local now, due = 0, 0
if delay > 0 or at > 0 then
  now = now_ms()
  due = at > 0 and at or now + delay
end
-- Every key the call may write is checked before its first write. A single item's SET fails by
-- itself on a data key of the wrong type (SET ... GET), or leaves it alone (SET NX: the item is
-- not added). Several items' data keys are read at once (but with the existence check and a
-- time to live: a SET NX each): when every one that exists holds a string (as it does but for a
-- key written by something else), whether each item is new is known, and the new data goes in
-- one MSET (one SET each with a time to live); otherwise the call fails as a single SET ... GET
-- would, or, with the existence check, goes on one SET NX at a time. A delayed item's lease key
-- is replaced.
local STRIDE = arg(5) == '1' and 3 or 2
local items, leases, groups, named = {}, {}, {}, {}
for i = NQ + 6, #ARGV, STRIDE do
  items[#items + 1] = Q.item .. ARGV[i]
  if due > now then
    leases[#leases + 1] = Q.lease .. ARGV[i]
  end
  local g = STRIDE == 3 and ARGV[i + 2] or ''
  if g ~= '' then
    groups[#items] = g
    named[#named + 1] = Q.group .. g
  end
end
-- olds: each data key's value before the call (several items, unless each is written by a
-- SET NX anyway: with the existence check and a time to live); known: olds tells which exist.
local olds, known
if #items > 1 and (overwrite or ttl == 0) then
  olds, known = read_strings(items)
  if overwrite and not known then
    check_types('string', items)
  end
end
local sets = due > now and {Q.delayed} or {}
check_types('list', {Q.queue}, 'hash', {Q.deliveries, Q.reasons, Q.counts}, 'zset', sets)
if #leases > 1 then
  local _, strings = read_strings(leases)
  if not strings then
    check_types('string', leases)
  end
else
  check_types('string', leases)
end
check_wake(Q)
if #named > 0 then
  check_types('hash', {Q.grouped, Q.groups_state}, 'list', {Q.groups}, 'list', named, 'zset',
    {Q.groups_backlog})
end
-- An item is written (ok) unless the existence check finds its id (or an earlier copy of it in
-- the batch: the first copy wins); it is fresh when it is new (its bookkeeping is dropped).
local added, later, ready, fresh_ids, writes, seen, written = {}, {}, {}, {}, {}, {}, 0
local mine, tagged = {}, {}
for k, key in ipairs(items) do
  local at_k = NQ + 6 + STRIDE * (k - 1)
  local id, data = ARGV[at_k], ARGV[at_k + 1]
  local ok, fresh
  if known then
    ok = overwrite or not (olds[k] or seen[key])
    fresh = ok and not olds[k]
    seen[key] = true
    if ok and ttl > 0 then
      redis.call('SET', key, data, 'PX', ttl)
    elseif ok then
      writes[#writes + 1] = key
      writes[#writes + 1] = data
    end
  elseif overwrite then
    local old
    if ttl > 0 then
      old = redis.call('SET', key, data, 'PX', ttl, 'GET')
    else
      old = redis.call('SET', key, data, 'GET')
    end
    ok, fresh = true, not old
  else
    if ttl > 0 then
      ok = redis.call('SET', key, data, 'PX', ttl, 'NX')
    else
      ok = redis.call('SET', key, data, 'NX')
    end
    fresh = ok
  end
  if fresh then
    fresh_ids[#fresh_ids + 1] = id
  end
  if ok then
    if groups[k] then
      tagged[#tagged + 1] = id
      tagged[#tagged + 1] = groups[k]
    end
    if due > now then
      later[#later + 1] = id
    elseif groups[k] then
      mine[#mine + 1] = k
    else
      ready[#ready + 1] = id
    end
    added[k] = 1
    written = written + 1
  else
    added[k] = 0
  end
end
if #writes > 0 then
  -- An id named twice without the existence check keeps its last data, as one SET after
  -- another would.
  redis.call('MSET', unpack(writes))
end
for _, id in ipairs(later) do
  schedule(Q, id, due, now)
end
-- (A bookkeeping hash found empty by the checks has nothing to drop.)
if #fresh_ids > 0 and SIZES[Q.deliveries] ~= 0 then
  redis.call('HDEL', Q.deliveries, unpack(fresh_ids))
end
if #fresh_ids > 0 and SIZES[Q.reasons] ~= 0 then
  redis.call('HDEL', Q.reasons, unpack(fresh_ids))
end
if #fresh_ids > 0 and (SIZES[Q.grouped] or 0) > 0 then
  redis.call('HDEL', Q.grouped, unpack(fresh_ids))
end
if #tagged > 0 then
  if overwrite and SIZES[Q.grouped] > 0 then
    keep_flight(Q, tagged)
  end
  redis.call('HSET', Q.grouped, unpack(tagged))
end
if #ready > 0 then
  redis.call('LPUSH', Q.queue, unpack(ready))
  wake(Q, #ready)
end
for _, k in ipairs(mine) do
  group_push(Q, groups[k], ARGV[NQ + 6 + STRIDE * (k - 1)], false)
end
count(Q, 'added', written)
if Q.event_cap then
  for k = 1, #items do
    if added[k] == 1 then
      emit(Q, 'added', ARGV[NQ + 6 + STRIDE * (k - 1)])
    end
  end
end
if arg(1) == 'p' then
  return 1
end
return added

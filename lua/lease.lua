-- lease: lease up to count items from one or more queues, in the queues' order (highest
-- priority first), without blocking; or hand them out at most once. Due delayed items are moved
-- onto their main queue first.
--#include queue.lua
--#include wake.lua
--#include delay.lua
--#include take.lua
--#include stray.lua
--#include finish.lua
--#include rate.lua
--#include group.lua
-- KEYS[i] queue i's main queue and ARGV[i] its key prefix, for queues i = 1..n in priority order
-- (see queue.lua)
-- arg(1) lease_ms: the lease length in ms
-- arg(2) token: the lease token
-- arg(3) once: '1' to hand items out at most once
-- arg(4) count: how many items
-- arg(5) budget: how many ids the call may drop or bury before it hands control back (and how
--   many due delayed items it promotes per queue)
-- arg(6) register_ms: when nothing is found, ms for which to register the caller as a worker
--   blocked on the queues (0: it will not block); on one queue, only when it has a delayed item
-- arg(7) waiter: the caller's waiter id ('' when it does not block)
-- arg(8) registered: '1' when the caller is registered already (it then leaves once it has
--   items, or when it will not block)
-- arg(8+i) max_deliveries: queue i's max deliveries (0: no limit)
-- arg(9+n) finish_queue (optional): with a completion that comes with the lease (a worker
--   completes its item and looks for the next in one call, never a blocking one: register_ms is
--   then 0), the index of the completed item's queue
-- arg(10+n) finish_id (optional): the completed item's id
-- Returns, when items are handed out, one flat list: queue index, id, data and deliveries of
-- each item in turn, then the ms they were leased at (one time for the call); when there is
-- none: the ms until the next delayed item is due (-1 if none is), or CALL_AGAIN when the budget
-- ran out on ids dropped or buried (none handed out): the caller calls again; or, when a
-- queue's rate limit (rate.lua) held items back, RATE_WAIT - the ms until the caller's turn
-- (a turn is kept for a caller that will wait: register_ms > 0). A queue with fair groups
-- (group.lua) takes its turns from its ring first, one item per turn.
-- With a completion: {1 when this call completed the item (0 when it was done already), that
-- reply}.
-- Keeps: an id enters the processing list and gets its lease in the same step, so a leased item
-- is always on the processing list, and so is an id met on the main queue while its lease is
-- live (it is left to its holder); an id without a data key is dropped, never handed out; an
-- item is never handed out more than max deliveries times; the waiting set and the wake list
-- expire with the last registration. Every queue's keys are type-checked (or read) before the
-- first write; the dead letter of an id that has reached max deliveries is checked before the
-- ids it came with are taken (after earlier takes of the same call, if any). A
-- completion is checked after the queues and before its own first write, which comes before the
-- lease's first: an error leaves nothing changed, but for that dead letter's, which leaves the
-- completion done.
-- The reply that asks the caller to call again (CALL_AGAIN in lease.py, which a test compares).
local CALL_AGAIN = -2
-- The reply to a caller refused by a rate limit is RATE_WAIT - its wait in ms (lease.py too).
local RATE_WAIT = -3
local ms, token, once = arg(1), arg(2), arg(3) == '1'
local wanted = tonumber(arg(4))
-- The budget, fixed for the call; budget counts down what is left of it.
local BUDGET = tonumber(arg(5))
local register_ms, waiter, registered = tonumber(arg(6)), arg(7), arg(8) == '1'
local budget = BUDGET
local now = now_ms()
-- Every lease of the call has the value token@now, made once.
local stamp = token .. '@' .. now
-- The reply's rows, flat (four entries per item), and how many items they hold.
local out, got = {}, 0
-- Every key the call may write is checked before its first write. A data key of another type
-- reads as none (the id is dropped), a lease key of another type as a live lease (the id is a
-- stray copy): neither is written.
-- Each queue's key names, made once for the call.
local queues, rates, rate_wait, ringed = {}, {}, nil, {}
for i = 1, NQ do
  queues[i] = queue_at(i)
end
-- Every queue's keys are checked here, with max deliveries the dead set and counters its
-- burials write too, but for the first queue's delayed set, main queue and wake list when the
-- call neither completes an item (whose completion writes first) nor drops a registered
-- caller's marker: those are read before they may be written (promote reads the delayed set
-- and checks the other two before it writes, when items are due; the ids are read off the main
-- queue before they are taken).
local finishing = arg(9 + NQ) ~= nil
local first_reads = not finishing and not registered
-- The ids are taken before they are read (one RPOP instead of LRANGE and RPOP) when no dead
-- letter may need checking first and the call will not register the caller (see from_main).
local pop_first = register_ms == 0 and not registered
-- The keys of the optional features (rate limit, fair groups, delayed items, failure reasons,
-- blocked workers), probed in one read per queue: a queue that uses none of them pays neither
-- their checks nor their reads (rate_read, the ring, promote, next_due, check_wake).
-- (The first queue of a plain lease does not check its wake list: its waiting set is left out;
-- the completed item's queue has its groups' hash probed too, for the completion.)
local finished_at = finishing and tonumber(arg(9 + NQ))
for i = 1, NQ do
  local q = queues[i]
  if i == 1 and first_reads then
    probe(q, 'rate', 'groups', 'delayed', 'reasons')
  elseif i == finished_at then
    probe(q, 'rate', 'groups', 'delayed', 'reasons', 'waiting', 'grouped')
  else
    probe(q, 'rate', 'groups', 'delayed', 'reasons', 'waiting')
  end
  if i == 1 and first_reads then
    check_types('list', {q.processing}, 'hash', {q.deliveries, q.reasons})
  elseif i == finished_at then
    -- The completion reads this queue's processing list and drops its delivery counts before
    -- its first write (finish.lua), which checks them.
    check_types('list', {q.queue}, 'hash', {q.reasons}, 'zset', {q.delayed})
  else
    check_types('list', {q.queue, q.processing}, 'hash', {q.deliveries, q.reasons}, 'zset',
      {q.delayed})
  end
  if tonumber(arg(8 + i)) > 0 then
    check_types('zset', {q.dead}, 'hash', {q.counts})
  end
  rates[i] = rate_read(q, waiter)
  -- The ring, read here: the group keys the turns write are checked when it holds groups.
  local ring = SIZES[q.groups] or redis.pcall('LLEN', q.groups)
  if type(ring) == 'table' then
    check_types('list', {q.groups})
  end
  ringed[i] = ring ~= 0
  if ringed[i] then
    check_types('hash', {q.groups_state, q.grouped}, 'list', {q.queue}, 'zset', {q.groups_backlog,
      q.groups_paced})
    check_wake(q)
  end
  if register_ms > 0 or registered then
    check_types('zset', {q.waiting}, 'list', {q.wake})
  elseif i > 1 or not first_reads then
    check_wake(q)
  end
end
-- The completion, if any, before anything is leased (finish.lua).
local finished
if finishing then
  finished = finish(queues[finished_at], {arg(10 + NQ)})[1]
end
-- The call's reply, with the completion's outcome when there is one.
local function answer(value)
  if finished == nil then
    return value
  end
  return {finished, value}
end
-- Take items off q's main queue until got reaches upto (or the budget runs out).
local function from_main(q, max, upto)
  while got < upto and budget > 0 do
    -- The oldest ids (at the tail; the oldest is the last) and their data, in one call each. The
    -- ids are read before they are taken (RPOP, below): their dead letters are checked first,
    -- and a script that has run a write may write past maxmemory, so on an empty queue a blocked
    -- worker's registration must be the first write, for the server to refuse it when full.
    -- Without a limit on deliveries, and when the call will not register the caller, nothing
    -- needs reading before the ids are taken: they are popped at once (pop_first; RPOP names
    -- them oldest first, LRANGE oldest last).
    local from = -math.min(upto - got, budget)
    local popped = pop_first and max == 0
    local ids
    if popped then
      ids = redis.pcall('RPOP', q.queue, -from)
    else
      ids = redis.pcall('LRANGE', q.queue, from, '-1')
    end
    if type(ids) == 'table' and ids.err then
      -- This read is the first queue's check of its main queue (see first_reads): a key of
      -- another type gets the error that names it; any other error is raised as it is.
      check_types('list', {q.queue})
      ids = redis.call('LRANGE', q.queue, from, '-1')
    end
    if not ids or #ids == 0 then
      return
    end
    if popped then
      local n = #ids
      for j = 1, math.floor(n / 2) do
        ids[j], ids[n + 1 - j] = ids[n + 1 - j], ids[j]
      end
    end
    local keys = {}
    for j, id in ipairs(ids) do
      keys[j] = q.item .. id
    end
    local data = redis.call('MGET', unpack(keys))
    -- The delivery counts, read in one call when there are several ids or a limit to check; the
    -- new counts of the ids handed out are then written in one call too. An id taken twice in
    -- one chunk is handed out once: its second copy meets its new lease, or, handed out at most
    -- once, is dropped as an item that is gone.
    local seen
    if max > 0 or #ids > 1 then
      seen = redis.call('HMGET', q.deliveries, unpack(ids))
      if max > 0 then
        check_types(bury_keys(q, ids, seen, max))
      end
    end
    if not popped then
      redis.call('RPOP', q.queue, #ids)
    end
    local taken_ids, counts, handed = {}, {}, {}
    for j = #ids, 1, -1 do -- oldest first
      local id, value = ids[j], data[j]
      if once and handed[id] then
        value = false
      end
      local n, leased = take(q, id, value, ms, stamp, max, once, now, seen and seen[j])
      if leased then
        watch(q, id)
      end
      if n then
        local k = #out
        out[k + 1], out[k + 2], out[k + 3], out[k + 4] = q.index, id, value, n
        got = got + 1
        handed[id] = true
        taken_ids[#taken_ids + 1] = id
        counts[#counts + 1] = id
        -- A first delivery's count as a string: the server formats a number with printf.
        counts[#counts + 1] = n == 1 and '1' or n
      else
        budget = budget - 1
      end
    end
    if not once and #taken_ids > 0 then
      redis.call('LPUSH', q.processing, unpack(taken_ids))
      if seen then
        redis.call('HSET', q.deliveries, unpack(counts))
      end
    end
  end
end

-- One turn of q's ring of groups (group.lua): pop the next group and hand out one of its items
-- (the empty name: one of the main queue's); the group goes back to the ring while it has ready
-- items and is below its cap. Returns false when the ring is empty.
local function group_turn(q, max)
  local g = redis.call('RPOP', q.groups)
  if not g then
    return false
  end
  local state = q.groups_state
  if g == PACER then
    return group_pacer(q, now)
  end
  if g == '' then
    from_main(q, max, got + 1)
    if redis.call('LLEN', q.queue) > 0 and redis.call('LLEN', q.groups) > 0 then
      redis.call('LPUSH', q.groups, '')
    else
      redis.call('HDEL', state, 'q:')
    end
    return true
  end
  local s = redis.call('HMGET', state, 'p:' .. g, 'b:' .. g, 'cap', 'q:', 'r:' .. g, 'rate',
    'q:' .. PACER)
  local busy, cap = tonumber(s[2] or '0'), tonumber(s[3] or '')
  if cap == 0 then
    cap = nil
  end
  local list = q.group .. g
  -- A paused group, or one at its cap, leaves the ring; so does one whose list is empty, or of
  -- another type (it reads as empty and is left alone); one over its rate limit waits off it.
  local id, lim, wait = false, group_limit(s[5], s[6]), false
  if not (s[1] or (cap and busy >= cap)) then
    wait = lim and not group_may(q, g, lim, now)
    if not wait then
      id = redis.pcall('RPOP', list)
      if id == false then
        group_empty(q, g)
      end
    end
  end
  if type(id) ~= 'string' then
    if wait then
      redis.call('HSET', state, 'q:' .. g, 'w')
      pacer_on(q, s[7])
    else
      redis.call('HDEL', state, 'q:' .. g)
    end
    budget = budget - 1
    return true
  end
  local left = group_took(q, g)
  local data = redis.call('MGET', q.item .. id)[1]
  local seen = redis.call('HGET', q.deliveries, id)
  if max > 0 and data then
    local err = wrong_type(bury_keys(q, {id}, {seen}, max))
    if err then
      -- Its dead letter cannot be written: the turn is undone before the error.
      redis.call('RPUSH', list, id)
      redis.call('RPUSH', q.groups, g)
      redis.call('ZINCRBY', q.groups_backlog, '1', g)
      add_ready(q, 1)
      error(err, 0)
    end
  end
  local n, leased = take(q, id, data, ms, stamp, max, once, now, seen)
  local more = true
  if n and lim then
    more = group_paced(q, g, lim, now, s[7])
  end
  if n then
    local k = #out
    out[k + 1], out[k + 2], out[k + 3], out[k + 4] = q.index, id, data, n
    got = got + 1
    if once then
      redis.call('HDEL', q.grouped, id)
    else
      redis.call('LPUSH', q.processing, id)
      redis.call('HSET', q.deliveries, id, n == 1 and '1' or n)
      redis.call('HSET', q.grouped, id, FLIGHT .. g)
      busy = redis.call('HINCRBY', state, 'b:' .. g, '1')
    end
  else
    if leased then
      watch(q, id)
    else
      redis.call('HDEL', q.grouped, id)
    end
    budget = budget - 1
  end
  if (not cap or busy < cap) and left > 0 and not more then
    redis.call('HSET', state, 'q:' .. g, 'w')
  elseif (not cap or busy < cap) and left > 0 then
    redis.call('LPUSH', q.groups, g)
  else
    redis.call('HDEL', state, 'q:' .. g)
  end
  -- The main queue takes its turns too while groups are on the ring.
  if not s[4] and redis.call('LLEN', q.queue) > 0 then
    redis.call('LPUSH', q.groups, '')
    redis.call('HSET', state, 'q:', '1')
  end
  return true
end

for i = 1, NQ do
  local q = queues[i]
  local max = tonumber(arg(8 + i))
  if registered then
    -- The caller looks again after a wait: a wake-up meant for it may have been taken.
    drop_marker(q)
  end
  promote(q, now, BUDGET, i == 1 and first_reads)
  local before = got
  local upto = got + rate_allow(rates[i], now, wanted - got, register_ms > 0)
  if ringed[i] then
    while got < upto and budget > 0 and group_turn(q, max) do
    end
  end
  from_main(q, max, upto)
  rate_wait = rate_spend(q, rates[i], now, got - before, rate_wait)
  if got >= wanted then
    break
  end
end
rate_wait = rate_settle(queues, rates, now, got, register_ms > 0 and waiter ~= '', rate_wait)
if registered and (got > 0 or register_ms == 0 or rate_wait) then
  for i = 1, NQ do
    leave(queues[i], waiter, now)
  end
end
if got > 0 then
  out[#out + 1] = now
  return answer(out)
end
if budget <= 0 then
  return answer(CALL_AGAIN)
end
if rate_wait then
  return answer(RATE_WAIT - rate_wait)
end
local soonest = -1
for i = 1, NQ do
  local q = queues[i]
  local due = next_due(q, now)
  if ringed[i] then
    due = group_due(q, now, due)
  end
  if due >= 0 and (soonest < 0 or due < soonest) then
    soonest = due
  end
  -- A caller blocked on one queue waits on its main queue, which any push wakes: it is
  -- registered only when a delayed item may need to wake it sooner (see schedule in delay.lua).
  if register_ms > 0 and (NQ > 1 or due >= 0) then
    join(q, waiter, now, register_ms)
  end
end
return answer(soonest)

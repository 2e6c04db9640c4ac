-- rate: a queue's rate limit, one token bucket in P:rate that every lease of the fleet draws on.
-- P:rate holds the limit (count items per per_ms ms, at most burst at once), the bucket (tokens
-- as of the ms at) and the turns of refused callers that wait (field r:<waiter> -> the ms of its
-- turn). A waiting caller is refused with a turn and its token is taken from the bucket at once
-- (tokens go below zero), so later callers get later turns, in order, and no caller can take
-- it; from its turn on, the caller leases with it, and until then the bucket holds one token
-- less (its cap is burst less the turns that have come). Every item handed out is also paced
-- by a GCRA clock (tat: the theoretical arrival time of the next item, at most burst - 1 items
-- early), so callers late to their turns that come together are handed out no faster.
--#include queue.lua
-- Keys: P:rate.
-- Defines: rate_read, rate_allow, rate_spend, rate_settle.
-- Keeps: P:rate is written only while it holds a limit (a queue without one writes nothing of
-- it); every item handed out takes one token and one step of the GCRA clock, so over any span
-- of t ms the leases of the whole fleet take at most burst + t * count / per_ms items; a turn
-- given up goes back to the bucket; at most TURNS turns are kept, and one a window old is
-- dropped (with its token: a caller that died while waiting).
local TURNS = 64

-- The queue's limit, bucket and turns (of which waiter's, '' for none), read before the script's
-- first write (which checks P:rate's type; the hash holds at most TURNS + 5 fields); nil when
-- the queue has no limit.
local function rate_read(q, waiter)
  if SIZES[q.rate] == 0 then -- known empty (probe)
    return nil
  end
  local v = redis.pcall('HGETALL', q.rate)
  if v.err then
    check_types('hash', {q.rate})
    v = redis.call('HGETALL', q.rate)
  end
  local h, turns = {}, {}
  for k = 1, #v, 2 do
    h[v[k]] = v[k + 1]
    if string.sub(v[k], 1, 2) == 'r:' then
      turns[v[k]] = tonumber(v[k + 1])
    end
  end
  local n = tonumber(h.count or '')
  if not n or n <= 0 then
    return nil
  end
  local burst = tonumber(h.burst)
  return {count = n, per = tonumber(h.per_ms), burst = burst,
    tokens = tonumber(h.tokens or '') or burst, at = tonumber(h.at or '') or 0, turns = turns,
    tat = tonumber(h.tat or '') or 0,
    own = waiter ~= '' and 'r:' .. waiter or nil}
end

-- How many of n items the limit r lets a lease take at now (all n without a limit). The bucket
-- is refilled as of now, up to burst less the other turns that have come (lapsed ones are
-- dropped); a caller whose turn has come has its token; one that holds a turn still to come
-- keeps it if it waits (it may take none), else gives its token back.
local function rate_allow(r, now, n, waits)
  if not r then
    return n
  end
  local ripe, lapsed, held = 0, {}, 0
  for field, turn in pairs(r.turns) do
    held = held + 1
    if turn + r.per < now then
      lapsed[#lapsed + 1] = field
    elseif turn <= now and field ~= r.own then
      ripe = ripe + 1
    end
  end
  r.cap, r.lapsed, r.count_turns = r.burst - ripe, lapsed, held - #lapsed
  r.tokens = math.min(r.cap, r.tokens + math.max(now - r.at, 0) * r.count / r.per)
  local turn = r.own and r.turns[r.own]
  r.grant, r.keep, r.settle = 0, false, turn ~= nil
  if turn and turn <= now then
    r.grant = 1
  elseif turn and waits then
    r.keep, r.settle = true, false
  elseif turn then
    r.tokens = math.min(r.cap, r.tokens + 1)
  end
  r.allowed = r.keep and 0 or math.min(n, r.grant + math.max(0, math.floor(r.tokens)))
  -- The GCRA clock: room for burst items at once, one more every gap ms.
  r.gap, r.next = r.per / r.count, math.max(r.tat, now)
  local room = math.floor(r.burst + (now - r.next) / r.gap)
  if r.allowed > room then
    r.allowed = math.max(room, 0)
    if r.allowed == 0 and r.grant == 1 then -- its turn has come, but not its step: it keeps it
      r.grant, r.keep, r.settle = 0, true, false
    end
  end
  r.step = r.next - (r.burst - 1) * r.gap -- when the clock has room for one
  return r.allowed
end

-- After a lease took taken items from q under the limit r (rate_allow first): spend their
-- tokens and settle the caller's turn; or, when the limit let it take none while q has items,
-- mark r refused and tell the caller the ms until it might lease (its turn, if it keeps one).
-- Returns the least of wait and that ms (wait when there is none).
local function rate_spend(q, r, now, taken, wait)
  if not r then
    return wait
  end
  local used = math.min(taken, r.grant)
  r.tokens = math.min(r.cap, r.tokens - (taken - used) + (r.grant - used))
  local changed = taken > 0 or r.settle or #r.lapsed > 0
  if r.settle then
    r.lapsed[#r.lapsed + 1] = r.own
  end
  if #r.lapsed > 0 then
    redis.call('HDEL', q.rate, unpack(r.lapsed))
  end
  if changed then
    redis.call('HSET', q.rate, 'tokens', tostring(r.tokens), 'at', now, 'tat',
      tostring(taken > 0 and r.next + taken * r.gap or r.tat))
  end
  local turn
  if taken == 0 and r.allowed == 0 and redis.call('LLEN', q.queue) > 0 then
    if r.keep then
      turn = math.max(r.turns[r.own], r.step)
    else
      r.refused = true
      turn = math.max(now + math.ceil((1 - r.tokens) * r.per / r.count), r.step)
    end
  end
  if turn and not (wait and wait < turn - now) then
    return math.max(math.ceil(turn - now), 0)
  end
  return wait
end

-- After a lease over queues qs (their limits rs, spent with rate_spend): when it took items, the
-- caller gives back any turn it holds (it will not come for it); when it took none and will
-- wait (reserve), it gets a turn, and its token, on the first queue that refused it (at most
-- TURNS are kept). Returns the least of wait and the ms until that turn.
local function rate_settle(qs, rs, now, got, reserve, wait)
  for i = 1, #qs do
    local r = rs[i]
    if got > 0 and r and r.own and r.turns[r.own] and not r.settle then
      if r.allowed == nil then
        rate_allow(r, now, 0, true)
      end
      redis.call('HDEL', qs[i].rate, r.own)
      redis.call('HSET', qs[i].rate, 'tokens', tostring(math.min(r.cap, r.tokens + 1)), 'at', now)
    elseif got == 0 and reserve and r and r.refused and r.own and r.count_turns < TURNS then
      r.tokens = r.tokens - 1
      local turn = math.max(now + math.ceil(-r.tokens * r.per / r.count), r.step)
      redis.call('HSET', qs[i].rate, r.own, turn, 'tokens', tostring(r.tokens), 'at', now)
      return wait and math.min(wait, turn - now) or turn - now
    end
  end
  return wait
end

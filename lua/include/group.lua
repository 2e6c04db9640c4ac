-- group: fair groups. A grouped item waits on its group's list (P:group:<group>) instead of the
-- main queue, and P:grouped names its group. The ring (P:groups) holds each group that has ready
-- items, is below its cap (the fleet's group concurrency) and is not paused, once: a lease pops
-- the group at its right end, takes one item of it and pushes it back on the left while it still
-- qualifies, so the groups take turns. P:groups:state keeps, per group, its items in flight
-- (b:<group>), whether it is on the ring (q:<group>) and whether it is paused (p:<group>), the
-- cap (field cap) and the items waiting on every group's list (field ready); P:groups:backlog
-- ranks the groups by the items waiting on their lists. While groups are on the ring, the
-- ungrouped main queue takes its turns as one more member of it, the empty name '' (no group is
-- named so).
--#include queue.lua
--#include wake.lua
-- Keys: P:groups, P:groups:state, P:groups:backlog, P:groups:paced, P:grouped, P:group:<group>;
-- the main queue and P:wake (a group that comes back to the ring wakes a blocked worker).
-- Defines: FLIGHT, check_groups, groups_of, keep_flight, group_enter, group_push, add_ready,
-- group_took, group_empty, group_done, requeue; PACER, group_limit, pacer_on, group_may, group_paced,
-- group_pacer, group_due (per-group rate limits, P:groups:paced).
-- Keeps: a group is on the ring at most once, exactly while its q: field is set; a group with
-- ready items, below its cap and not paused is on the ring once its state last changed (an item
-- added, an item done, resumed); every item of a group counts in b:<group> from its lease until
-- it is completed, released, buried or requeued by a clean, and exactly then its P:grouped value
-- is FLIGHT then its name, so whatever ends its flight counts it out once (wherever its entry is
-- on the processing list); a group's score in P:groups:backlog is the length of its list, and
-- the ready field their sum (every push and pop goes through group_push and group_took).

-- Check the group keys a script may write, before its first write: P:grouped always, and the ring
-- and the state when some item is grouped (SIZES then tells whether P:grouped holds any).
local function check_groups(q)
  check_types('hash', {q.grouped})
  if SIZES[q.grouped] > 0 then
    check_types('list', {q.groups}, 'hash', {q.groups_state}, 'zset', {q.groups_backlog})
  end
end

-- The mark of an item in flight in P:grouped: its value is FLIGHT then its group's name (no
-- group name holds the byte: names are UTF-8).
local FLIGHT = '\255'

-- The groups of ids (false for an ungrouped id), in one read, and which of them are in flight
-- (counted in their group's b: field); none are grouped when P:grouped is empty (as
-- check_groups found it).
local function groups_of(q, ids)
  if SIZES[q.grouped] == 0 or #ids == 0 then
    return {}, {}
  end
  local groups, flying = redis.call('HMGET', q.grouped, unpack(ids)), {}
  for j = 1, #ids do
    local g = groups[j]
    if g and string.byte(g, 1) == 255 then
      groups[j], flying[j] = string.sub(g, 2), true
    end
  end
  return groups, flying
end

-- tagged: ids and their groups, flat, about to be written to P:grouped by an add that replaces
-- existing items: an item in flight keeps its mark and the group that counted it, which counts
-- it out when its flight ends.
local function keep_flight(q, tagged)
  local ids = {}
  for k = 1, #tagged, 2 do
    ids[#ids + 1] = tagged[k]
  end
  local marks = redis.call('HMGET', q.grouped, unpack(ids))
  for j, mark in ipairs(marks) do
    if mark and string.byte(mark, 1) == 255 then
      tagged[2 * j] = mark
    end
  end
end

-- Add n to the ready field of the state (it goes when it reaches 0).
local function add_ready(q, n)
  if n ~= 0 and redis.call('HINCRBY', q.groups_state, 'ready', n) <= 0 then
    redis.call('HDEL', q.groups_state, 'ready')
  end
end

-- Put group g on the ring unless it is on it, paused, at its cap or without ready items; wake a
-- blocked worker when it does: an empty id on the main queue when it is empty (a worker blocked
-- on this queue alone waits on it; every client drops an id without data, as for schedule in
-- delay.lua), and a token on the wake list for workers blocked on several queues. The caller
-- checks the ring, the state, the main queue and the wake list (check_wake) beforehand. With
-- quiet (a lease that takes the turns itself), nobody is woken.
local function group_enter(q, g, quiet)
  local s = redis.call('HMGET', q.groups_state, 'q:' .. g, 'p:' .. g, 'b:' .. g, 'cap')
  local cap = tonumber(s[4] or '')
  if s[1] or s[2] or (cap and cap > 0 and tonumber(s[3] or '0') >= cap) then
    return
  end
  local ready = redis.pcall('LLEN', q.group .. g)
  if type(ready) ~= 'number' or ready == 0 then
    return
  end
  redis.call('LPUSH', q.groups, g)
  redis.call('HSET', q.groups_state, 'q:' .. g, '1')
  if quiet then
    return
  end
  if redis.call('LLEN', q.queue) == 0 then
    redis.call('LPUSH', q.queue, '')
  end
  wake(q)
end

-- Queue id on group g's list: at the back of the line, or (next) at the leasing end; the group
-- enters the ring. A group list of another type is left alone: the id goes to the main queue.
local function group_push(q, g, id, next)
  local pushed = redis.pcall(next and 'RPUSH' or 'LPUSH', q.group .. g, id)
  if type(pushed) ~= 'number' then
    redis.call(next and 'RPUSH' or 'LPUSH', q.queue, id)
    wake(q)
    return
  end
  redis.call('ZINCRBY', q.groups_backlog, '1', g)
  add_ready(q, 1)
  group_enter(q, g)
end

-- An id was popped off group g's list: its backlog drops. Returns the items left on the list.
-- When the count reaches 0 the list's own length is read, so a count that drifted (an id lost
-- from the list, which a deep clean puts back) heals there.
local function group_took(q, g)
  local left = tonumber(redis.call('ZINCRBY', q.groups_backlog, '-1', g))
  if left > 0 then
    add_ready(q, -1)
    return left
  end
  local length = redis.call('LLEN', q.group .. g)
  if length > 0 then
    redis.call('ZADD', q.groups_backlog, length, g)
  else
    redis.call('ZREM', q.groups_backlog, g)
  end
  add_ready(q, length - left - 1)
  return length
end

-- Group g's list was found empty: a backlog left by a lost id goes.
local function group_empty(q, g)
  local stale = redis.call('ZSCORE', q.groups_backlog, g)
  if stale then
    redis.call('ZREM', q.groups_backlog, g)
    add_ready(q, -tonumber(stale))
  end
end

-- An item of group g is no longer in flight (done, released, buried or requeued): the group's
-- count drops, and it may enter the ring again. With id, the item stays in its group, no
-- longer marked in flight (the caller drops its P:grouped entry otherwise).
local function group_done(q, g, id)
  if id then
    redis.call('HSET', q.grouped, id, g)
  end
  if redis.call('HINCRBY', q.groups_state, 'b:' .. g, '-1') <= 0 then
    redis.call('HDEL', q.groups_state, 'b:' .. g)
  end
  group_enter(q, g)
end

-- Push an id back to where it waits: its group's list when it is grouped (g: its group, or nil
-- to read it), else the main queue (see enqueue in wake.lua).
local function requeue(q, id, next, g)
  if g == nil then
    g = groups_of(q, {id})[1]
  end
  if g then
    group_push(q, g, id, next)
  else
    enqueue(q, id, next)
  end
end

-- Per-group rate limits. A group's own limit is the field r:<group> of the state, else the
-- default of every group (field rate), each 'count per_ms burst' (count 0: none). A limited
-- group is paced by a GCRA clock: P:groups:paced scores it with the theoretical arrival time
-- (tat, ms) of its next item; it may hand out an item while tat - now <= (burst - 1) * gap
-- (gap = per_ms / count), and each item moves tat to max(tat, now) + gap, so over any span of t
-- ms the group hands out at most burst + t / gap items (from the whole fleet). A group whose
-- limit says no leaves the ring as a paused or capped group does, marked 'w' in its q: field
-- (so nothing else puts it back), and waits on P:groups:paced until its tat. The ring then holds
-- the pacer, PACER (no group name holds the byte), while P:groups:paced has members: at its
-- turn, once per round, it takes up to PACER_STEP members whose tat has come off the set (an
-- entry whose tat has come means as much as none) and puts those that wait back on the ring
-- (at the end of the round), so a lease never scans the groups.
local PACER = '\255'
local PACER_STEP = 16

-- The limit of a group (own: its r: field, default: the rate field), {gap, burst}; nil for none.
local function group_limit(own, default)
  local spec = own or default
  if not spec then
    return nil
  end
  local items, per, burst = string.match(spec, '^(%S+) (%S+) (%S+)$')
  items = tonumber(items or '')
  if not items or items <= 0 then
    return nil
  end
  return {gap = tonumber(per) / items, burst = tonumber(burst)}
end

-- The pacer joins the ring (at the end of the round) unless it is on it (on: its q: field).
local function pacer_on(q, on)
  if not on then
    redis.call('LPUSH', q.groups, PACER)
    redis.call('HSET', q.groups_state, 'q:' .. PACER, '1')
  end
end

-- Whether group g, limited by lim, may hand out an item at now (it then keeps lim.tat).
local function group_may(q, g, lim, now)
  lim.tat = math.max(tonumber(redis.call('ZSCORE', q.groups_paced, g) or '0'), now)
  return lim.tat - now <= (lim.burst - 1) * lim.gap
end

-- Group g (limited by lim, read by group_may) handed out an item at now: its clock moves on, and
-- the pacer joins the ring (on: its q: field). Returns whether g may hand out another now.
local function group_paced(q, g, lim, now, on)
  lim.tat = lim.tat + lim.gap
  redis.call('ZADD', q.groups_paced, tostring(lim.tat), g)
  pacer_on(q, on)
  return lim.tat - now <= (lim.burst - 1) * lim.gap
end

-- The pacer's turn (popped off the ring): the groups whose tat has come leave P:groups:paced
-- (up to PACER_STEP), and those waiting on it enter the ring (quietly: the lease takes the
-- turns); the pacer goes back to the ring while the set has members. Returns whether the ring
-- holds others.
local function group_pacer(q, now)
  local due = redis.call('ZRANGEBYSCORE', q.groups_paced, '-inf', now, 'LIMIT', '0', PACER_STEP)
  if #due > 0 then
    redis.call('ZREM', q.groups_paced, unpack(due))
    local fields = {}
    for k, g in ipairs(due) do
      fields[k] = 'q:' .. g
    end
    local marks = redis.call('HMGET', q.groups_state, unpack(fields))
    for k, g in ipairs(due) do
      if marks[k] == 'w' then
        redis.call('HDEL', q.groups_state, fields[k])
        group_enter(q, g, true)
      end
    end
  end
  if redis.call('ZCARD', q.groups_paced) > 0 then
    redis.call('LPUSH', q.groups, PACER)
    return redis.call('LLEN', q.groups) > 1
  end
  redis.call('HDEL', q.groups_state, 'q:' .. PACER)
  return redis.call('LLEN', q.groups) > 0
end

-- The ms until the first tat on P:groups:paced, or due when that is sooner (-1: none).
local function group_due(q, now, due)
  local head = redis.call('ZRANGE', q.groups_paced, 0, 0, 'WITHSCORES')
  if not head[2] then
    return due
  end
  local wait = math.max(math.ceil(tonumber(head[2]) - now), 0)
  if due < 0 or wait < due then
    return wait
  end
  return due
end

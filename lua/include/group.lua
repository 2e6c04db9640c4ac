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
-- Keys: P:groups, P:groups:state, P:groups:backlog, P:grouped, P:group:<group>; the main queue
-- and P:wake (a group that comes back to the ring wakes a blocked worker).
-- Defines: FLIGHT, check_groups, groups_of, group_enter, group_push, add_ready, group_took,
-- group_empty, group_done, requeue.
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
-- checks the ring, the state, the main queue and the wake list (check_wake) beforehand.
local function group_enter(q, g)
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

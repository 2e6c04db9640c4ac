-- queue: the layout every queue-level script shares.
-- Keys: a script works on queues 1..n, n = #KEYS: KEYS[i] is queue i's main queue, ARGV[i] its
-- key prefix; the script's own arguments follow (arg(k) is ARGV[n + k]). The other keys of a queue
-- are named from its prefix P by the layout table (src/redis_work_queue/layout.py, one row per
-- key: its suffix, type and what it holds), which the loader writes into NAMES below: q.processing
-- is P:processing, q.item .. id is P:item:<id>, and so on for every row. Every one of them shares
-- P's hash tag, if any.
-- Defines: NQ, EVENTED, queue_at(i) (queue i's key names), Q (queue 1's), arg(k), wrong_type,
-- wrong_key, check_types, SIZES, probe and read_strings (the type checks before a first write),
-- NO_KEYS, now_ms, now_ms_text, delivered, forget, wakeups, DELAY_TOKEN.
-- Keeps: every key name is made from its queue's prefix, so a call on one queue never touches
-- another queue's keys.
local NQ = #KEYS

-- The value of a delayed item's lease key (see delay.lua): not a lease, but no cleaner of any
-- implementation queues an item whose lease key exists.
local DELAY_TOKEN = 'delayed'

-- A queue's key names after its prefix, each key made the first time it is used. The loader fills
-- the table from the layout (see loader.py): the line is a directive.
local NAMES = {} --#layout
local LAZY = {
  __index = function(q, name)
    local key = q.prefix .. NAMES[name]
    q[name] = key
    return key
  end,
}

-- Each prefix's key names (a table of LAZY: NAMED[prefix].__index), as the metatable of the
-- queues of that prefix, which read their names from it. A function library keeps it from call
-- to call (the directive), so that a queue's names are made once; a script has none (false:
-- its queues are of LAZY, their names made on each call). At most NAMED_MAX prefixes are kept
-- (then it starts again).
local NAMED = {} --#kept
local NAMED_MAX = 256

local function names_of(prefix)
  local meta = NAMED[prefix]
  if meta == nil then
    if (NAMED[NAMED] or 0) >= NAMED_MAX then
      for key in pairs(NAMED) do
        NAMED[key] = nil
      end
    end
    meta = {__index = setmetatable({prefix = prefix}, LAZY)}
    NAMED[prefix] = meta
    NAMED[NAMED] = (NAMED[NAMED] or 0) + 1 -- the count, under a key no prefix is
  end
  return meta
end

-- The queues of the call with events on (see events.lua): their P:events is type-checked by
-- check_types.
local EVENTED = {}

-- ARGV[i] is the prefix, or, with events on or results kept, NUL, the settings, NUL, then the
-- prefix (no queue name starts with NUL): the settings are the stream's cap (empty with events
-- off), then, with results kept, ':' and how long they are kept in ms. event_cap is false with
-- events off, keep false without results kept.
local function queue_at(i)
  local prefix, cap, keep = ARGV[i], false, false
  if string.byte(prefix, 1) == 0 then
    local stop = string.find(prefix, '\0', 2, true)
    cap = string.sub(prefix, 2, stop - 1)
    prefix = string.sub(prefix, stop + 1)
    local colon = string.find(cap, ':', 1, true)
    if colon then
      keep = string.sub(cap, colon + 1)
      cap = string.sub(cap, 1, colon - 1)
    end
    if cap == '' then
      cap = false
    end
  end
  local q = {index = i, queue = KEYS[i], prefix = prefix, event_cap = cap, keep = keep}
  setmetatable(q, NAMED and names_of(prefix) or LAZY)
  if cap then
    EVENTED[#EVENTED + 1] = q
  end
  return q
end

local Q = queue_at(1)

local function arg(k)
  return ARGV[NQ + k]
end

-- The cheapest read of each type: O(1), it fails on a key of another type and allocates nothing.
local TYPED_READ = {
  string = 'STRLEN', list = 'LLEN', hash = 'HLEN', zset = 'ZCARD', stream = 'XLEN',
}

-- The sizes read by the type checks of the call, by key (what the typed read answered: 0 for a
-- key that does not exist), so that a script can skip a write that has nothing to change.
local SIZES = {}

-- No keys, for a check that has none to check this call (a table no code changes).
local NO_KEYS = {}

-- The error of key when it exists and holds another type than kind; nil when it does not.
local function wrong_key(kind, key)
  -- A key sized already by this call (or known absent: see probe) holds its kind, or none.
  local read = SIZES[key] or redis.pcall(TYPED_READ[kind], key)
  SIZES[key] = read
  if type(read) == 'table' then
    if not string.find(tostring(read.err), 'WRONGTYPE', 1, true) then
      redis.call(TYPED_READ[kind], key) -- any other error (NOPERM...) is raised as it is
    end
    local found = redis.call('TYPE', key)
    return 'WRONGTYPE ' .. key .. ' holds a ' .. (found.ok or found) .. ', not a ' .. kind
  end
  return nil
end

-- The error of the first key, among pairs of a kind ('string', 'list', 'hash', 'zset' or
-- 'stream') and a key or a list of keys, that exists and holds another type than its kind; nil
-- when there is none. (A single key may go as it is: no table is made for it.)
local function wrong_type(...)
  for i = 1, select('#', ...), 2 do
    local kind, keys = select(i, ...)
    if type(keys) ~= 'table' then
      local err = wrong_key(kind, keys)
      if err then
        return err
      end
    else
      for j = 1, #keys do
        local err = wrong_key(kind, keys[j])
        if err then
          return err
        end
      end
    end
  end
  return nil
end

-- Fail early on a wrong type: called with wrong_type's arguments before a script's first write,
-- so that the error leaves every key as it was. The events stream of each queue with events on
-- is checked too (its first time).
local function check_types(...)
  local err = wrong_type(...)
  for _, q in ipairs(EVENTED) do
    if err then
      break
    end
    if SIZES[q.events] == nil then
      err = wrong_key('stream', q.events)
    end
  end
  if err then
    error(err, 0)
  end
end

-- Probe keys of q (up to six names of its layout, a to f) that a queue holds only while it uses
-- an optional feature (a rate limit, fair groups, delayed items, failure reasons, blocked
-- workers...): one read (EXISTS counts keys of every type) tells when none of them exists, and
-- each is then known empty (its size 0 in SIZES), so that its type check and the reads the
-- feature would need are skipped. When one exists, nothing is learned (each is checked and read
-- as it comes). (Spelled out by count: a table and a loop here cost more than a command.)
local function probe(q, a, b, c, d, e, f)
  local found
  if f then
    found = redis.call('EXISTS', q[a], q[b], q[c], q[d], q[e], q[f])
  elseif e then
    found = redis.call('EXISTS', q[a], q[b], q[c], q[d], q[e])
  elseif d then
    found = redis.call('EXISTS', q[a], q[b], q[c], q[d])
  elseif c then
    found = redis.call('EXISTS', q[a], q[b], q[c])
  elseif b then
    found = redis.call('EXISTS', q[a], q[b])
  else
    found = redis.call('EXISTS', q[a])
  end
  if found == 0 then
    SIZES[q[a]] = 0
    if b then SIZES[q[b]] = 0 end
    if c then SIZES[q[c]] = 0 end
    if d then SIZES[q[d]] = 0 end
    if e then SIZES[q[e]] = 0 end
    if f then SIZES[q[f]] = 0 end
  end
end

-- The values of keys (a list of keys: MGET's reply, which reads a key of another type as none),
-- and whether every key of them that exists holds a string (EXISTS counts every key): two calls
-- however many keys there are.
local function read_strings(keys)
  local values = redis.call('MGET', unpack(keys))
  local strings = 0
  for _, value in ipairs(values) do
    if value then
      strings = strings + 1
    end
  end
  return values, redis.call('EXISTS', unpack(keys)) == strings
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The server's time in ms, and the same as decimal text, made from TIME's digits (Lua formats
-- a number with printf, which costs more than the rest of a short call's Lua).
local function now_ms_text()
  local t = redis.call('TIME')
  local us = t[2]
  local text = t[1] .. string.sub(string.rep('0', 6 - #us) .. us, 1, 3)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(us) / 1000), text
end

local function delivered(q, id)
  return tonumber(redis.call('HGET', q.deliveries, id) or '0')
end

-- How many wake-up entries the main queue holds (0 or 1): an empty id with no item of that id,
-- pushed to wake a blocked worker (see group.lua and delay.lua). One is pushed only onto an empty
-- main queue, at its leasing end, and an id pushed at that end takes its place (enqueue in
-- wake.lua), so it is the entry at index -1 while it is there. Two O(1) reads.
local function wakeups(q)
  if redis.call('LINDEX', q.queue, -1) == '' and redis.call('EXISTS', q.item) == 0 then
    return 1
  end
  return 0
end

-- Drop an item's bookkeeping (its delivery count and last reason).
local function forget(q, id)
  redis.call('HDEL', q.deliveries, id)
  redis.call('HDEL', q.reasons, id)
end

-- Add n (when not 0) to one of the queue's counters in P:counts: 'added', 'completed', 'failed',
-- 'retried', 'dead', 'expired' or 'requeued', each a number of items. The caller checks P:counts
-- beforehand. (One, the usual count, goes as a string: the server formats a number argument with
-- printf on every call.)
local function count(q, name, n)
  if n == nil or n == 1 then
    redis.call('HINCRBY', q.counts, name, '1')
  elseif n ~= 0 then
    redis.call('HINCRBY', q.counts, name, n)
  end
end

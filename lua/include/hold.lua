-- hold: the deep clean's hold on a suspect item, and the clock that sizes every clean step.
-- A hold is a lease key (P:lease:<id>) whose value is HOLD_PREFIX followed by one deep-clean
-- run's token. The deep clean sets it on an item that exists, has no lease and was not seen on
-- the main queue. Like any lease it keeps every cleaner (of any implementation) and every lease
-- script from queueing the item, so a held id never enters the main queue; it may still leave it
-- (a worker's lease drops a held id it pops, as a stray copy of a leased item). A light clean that
-- finds a held id on the processing list treats it as an expired lease: it removes the hold with
-- the entry and requeues (or buries) the item.
-- Keys: P:lease:<id> (its value only: the scripts write the holds).
-- Defines: HOLD_PREFIX, is_hold, is_data, micros, elapsed.
-- Keeps: elapsed() counts from the start of the script that includes this file.
local HOLD_PREFIX = 'deep-clean:'

local function is_hold(value)
  return value and string.sub(value, 1, #HOLD_PREFIX) == HOLD_PREFIX
end

-- Whether a data key holds an item: it exists and is a string. A key of another type named like
-- one (P:item:<id> a hash) is no item of this queue: the deep clean leaves it alone.
local function is_data(key)
  local found = redis.call('TYPE', key)
  return (found.ok or found) == 'string'
end

local function micros()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The server time this call has held Redis so far, in microseconds: each clean step returns it,
-- and the client sizes the next step from it. (A script that does not use elapsed is sent
-- without STARTED, so it reads no clock for it: see loader.py.)
local STARTED = micros()
local function elapsed()
  return micros() - STARTED
end

-- heartbeat: register a live worker of the queue (or remove its registration).
--#include queue.lua
-- KEYS[1] the queue's main queue (its other keys are named from ARGV[1], the key prefix P):
-- P:workers (sorted set, worker id -> ms its registration lapses) and P:worker:<id> (hash).
-- arg(1) worker id, arg(2) registration length in ms (0: remove the registration), arg(3...)
-- field, value pairs written into P:worker:<id> (the script adds 'beat', the server time in ms).
-- Returns the number of live workers of the queue after the call.
-- Keeps: P:workers holds no lapsed registration after a beat, and neither key outlives the last
-- live registration: P:worker:<id> expires with its registration and P:workers with the latest.
-- Both keys are type-checked before the first write, so a wrong type changes nothing.
local id, ttl = arg(1), tonumber(arg(2))
local workers = Q.prefix .. ':workers'
local mine = Q.prefix .. ':worker:' .. id
local function check(key, kind)
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= kind then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. found .. ', not a ' .. kind)
  end
end
local bad = check(workers, 'zset') or check(mine, 'hash')
if bad then
  return bad
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', workers, '-inf', now)
if ttl <= 0 then
  redis.call('ZREM', workers, id)
  redis.call('DEL', mine)
  return redis.call('ZCARD', workers)
end
redis.call('ZADD', workers, now + ttl, id)
redis.call('DEL', mine)
redis.call('HSET', mine, 'beat', now, unpack(ARGV, NQ + 3))
redis.call('PEXPIRE', mine, ttl)
local last = redis.call('ZRANGE', workers, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', workers, tonumber(last[2]))
return redis.call('ZCARD', workers)

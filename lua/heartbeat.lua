-- heartbeat: register a live worker of the queue (or remove its registration), and add the job
-- durations it measured since its last beat to the queue's histogram.
--#include queue.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) worker: the worker's id
-- arg(2) ttl_ms: the registration's length in ms (0: remove the registration)
-- arg(3) durations: n, the number of histogram pairs that lead the pairs below
-- arg(4...) pairs: n pairs of a histogram field and its increment, then field, value pairs
--   written into P:worker:<id> (the script adds 'beat', the server time in ms)
-- Writes P:workers (sorted set, worker id -> ms its registration lapses), P:worker:<id> (hash)
-- and P:durations (hash, histogram field -> count, see durations.py).
-- Returns the number of live workers of the queue after the call.
-- Keeps: P:workers holds no lapsed registration after a beat, and neither key outlives the last
-- live registration: P:worker:<id> expires with its registration and P:workers with the latest.
-- P:durations only grows (HINCRBY), as counters do; it has no expiry.
-- Every key is read (ZCARD, HLEN) before the first write: a key of the wrong type fails the
-- script with WRONGTYPE before anything changed.
local id, ttl, n = arg(1), tonumber(arg(2)), tonumber(arg(3))
local workers, mine, durations = Q.workers, Q.worker .. id, Q.durations
check_types('zset', workers, 'hash', mine, 'hash', durations)
for i = 4, 3 + 2 * n, 2 do
  redis.call('HINCRBY', durations, arg(i), arg(i + 1))
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
redis.call('HSET', mine, 'beat', now, unpack(ARGV, NQ + 4 + 2 * n))
redis.call('PEXPIRE', mine, ttl)
local last = redis.call('ZRANGE', workers, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', workers, math.max(tonumber(last[2]) - now, 1))
return redis.call('ZCARD', workers)

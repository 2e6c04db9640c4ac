-- complete_result: complete one item and keep its result (a queue with keep_results).
--#include queue.lua
--#include finish.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) keep_ms: how long the result is kept, in ms
-- arg(2) item_id: the item's id
-- arg(3) result: the result (bytes; may be empty)
-- Returns 1 when this call completed the item (its result is then kept) and 0 when it had
-- already been completed (or had expired): then nothing is kept.
-- Keeps: as complete.lua (finish.lua), and in the same step the result key holds exactly one
-- entry, 'c' followed by the result, with a time to live of keep_ms: a caller blocked on the key
-- (result(), BRPOPLPUSH of the key onto itself, which keeps the entry) is woken by the push. The
-- item's last progress report goes with it. Every key the call may write is type-checked before
-- its first write.
local keep, id, value = arg(1), arg(2), arg(3)
local result, progress = Q.result .. id, Q.progress .. id
check_types('list', {result}, 'string', {progress})
local done = finish(Q, {id})[1]
if done == 1 then
  redis.call('DEL', result, progress)
  redis.call('RPUSH', result, 'c' .. value)
  redis.call('PEXPIRE', result, keep)
end
return done

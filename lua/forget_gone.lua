-- forget_gone: one HSCAN step over a bookkeeping hash, dropping the entries of items that no
-- longer exist (completed by a client of another implementation, or expired).
--#include queue.lua
--#include hold.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1) which: the hash to scan, 'deliveries' or 'reasons'
-- arg(2) cursor: the HSCAN cursor
-- arg(3) count: the COUNT hint
-- Returns {microseconds this call held Redis, next cursor, fields seen, ids forgotten}.
-- Keeps: the bookkeeping of an existing item is never touched. Both hashes are read before the
-- first write, so a key of the wrong type fails the call before anything is written.
check_types('hash', {Q.deliveries, Q.reasons})
local key = arg(1) == 'reasons' and Q.reasons or Q.deliveries
local found = redis.call('HSCAN', key, arg(2), 'COUNT', tonumber(arg(3)))
local fields = found[2]
local gone = 0
for i = 1, #fields, 2 do
  local id = fields[i]
  if redis.call('EXISTS', Q.item .. id) == 0 then
    forget(Q, id)
    gone = gone + 1
  end
end
return {elapsed(), found[1], #fields / 2, gone}

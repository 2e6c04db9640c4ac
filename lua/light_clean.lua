-- light_clean: one bounded step of the light clean, over the oldest end of the processing list.
-- KEYS[1] main queue, KEYS[2] processing list
-- ARGV[1] item-key prefix, ARGV[2] lease-key prefix, ARGV[3] most ids to examine in this call
-- Returns {examined, requeued, dropped}.
-- Each examined id is popped from the tail of the processing list and then: dropped when its
-- data key is gone (a completed item); pushed back onto the head of the processing list when its
-- lease is live; pushed onto the main queue otherwise (its lease expired, or its worker died
-- before taking the lease). Repeated calls rotate through the whole list in its own order.
-- Keeps: an item with a live lease is never requeued, and a requeued id leaves the processing
-- list in the same step, so it is never both queued and leased.
local budget = tonumber(ARGV[3])
local examined, requeued, dropped = 0, 0, 0
for _ = 1, budget do
  local id = redis.call('RPOP', KEYS[2])
  if not id then
    break
  end
  examined = examined + 1
  if redis.call('EXISTS', ARGV[1] .. id) == 0 then
    dropped = dropped + 1
  elseif redis.call('EXISTS', ARGV[2] .. id) == 1 then
    redis.call('LPUSH', KEYS[2], id)
  else
    redis.call('LPUSH', KEYS[1], id)
    requeued = requeued + 1
  end
end
return {examined, requeued, dropped}

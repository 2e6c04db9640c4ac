-- complete: mark items as done and remove every trace of them.
--#include queue.lua
--#include finish.lua
-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)
-- arg(1...) ids: the items' ids
-- Returns, per id, 1 when this call deleted its data key (it completed the item) and 0 when the
-- item had already been completed (or had expired).
-- Keeps: as finish (finish.lua): exactly one call returns 1 per item; no bookkeeping of an item
-- is left behind; every key the call may write is type-checked before its first write.
return finish(Q, {unpack(ARGV, NQ + 1)})

"""Wrong key types and a full server, on a sharded queue.

Each shard's call is one atomic script, type-checked before its first write, as on one queue:
a key of the wrong type in the item's shard either leaves the call's change whole with the
planted key untouched, or raises the library's error with nothing changed at all. On a server
out of memory, an add, lease or completion of a sharded queue is refused with nothing changed.
(A batch over several shards is one atomic call per shard, not one transaction: the shards a
call has already written keep their change when a later shard's call fails.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.exceptions import OutOfMemoryError

from checks import TYPES, dump, limit, plant
from redis_work_queue import Item, KeyPrefix, WorkQueue, WorkQueueError, layout
from redis_work_queue.ops.sharded import shard_index

pytestmark = pytest.mark.real_redis

NAME = KeyPrefix("sc")
SHARDS = 3
#: Operations over several shards: on an error, the failing shard is left as it was (the
#: others may have changed: each shard's call is atomic on its own).
SEVERAL = {"lease", "light_clean", "requeue_dead"}
#: The keys of a shard that its item operations write, by QueueKeys attribute.
WRITTEN = ("queue", "processing", "deliveries", "reasons", "delayed", "dead", "counts", "wake")


def ids_on(shard: int, n: int) -> list[str]:
    """``n`` ids that live on ``shard``."""
    found = []
    k = 0
    while len(found) < n:
        if shard_index(f"x{k}", SHARDS) == shard:
            found.append(f"x{k}")
        k += 1
    return found


def setup(db: redis.Redis) -> tuple[WorkQueue, dict[str, Item]]:
    """A sharded queue with items queued on every shard, two leased on shard 0, one delayed."""
    db.flushdb()
    queue = WorkQueue(NAME, shards=SHARDS, max_deliveries=2)
    for shard in range(SHARDS):
        queue.add_items(db, [Item(b"d", id=i) for i in ids_on(shard, 3)])
    first = WorkQueue(KeyPrefix("{sc:0}"), max_deliveries=2)
    held = {item.id(): item for item in first.lease_many(db, 30, 2, block=False)}
    queue.add_item(db, Item(b"later", id="later"), delay=60)
    return queue, held


OPERATIONS: dict[str, Callable[[WorkQueue, redis.Redis, dict[str, Item]], Any]] = {
    "add_item": lambda q, db, held: q.add_item(db, Item(b"n", id=ids_on(0, 4)[3])),
    "add_items": lambda q, db, held: q.add_items(db, [Item(b"n", id=ids_on(0, 5)[4])]),
    "lease": lambda q, db, held: q.lease_many(db, 30, 20, block=False),
    "complete": lambda q, db, held: q.complete(db, next(iter(held.values()))),
    "renew": lambda q, db, held: q.renew(db, next(iter(held.values())), 60),
    "release": lambda q, db, held: q.release(db, next(iter(held.values())), reason="r"),
    "give_back": lambda q, db, held: q.give_back(db, list(held.values())),
    "light_clean": lambda q, db, held: q.light_clean(db),
    "requeue_dead": lambda q, db, held: q.requeue_dead(db),
}


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("key", WRITTEN)
@pytest.mark.parametrize("op", OPERATIONS)
def test_a_wrong_type_in_a_shard_changes_nothing_or_is_left_alone(
    real_db: redis.Redis, op: str, key: str, kind: str
) -> None:
    queue, held = setup(real_db)
    planted = getattr(queue.ops.shard_ops[0].keys, key)
    if layout.KEY_TYPES[key] == kind:
        pytest.skip("the layout's own type")
    plant(real_db, planted, kind)
    before = dump(real_db)
    try:
        OPERATIONS[op](queue, real_db, held)
    except WorkQueueError:
        after = dump(real_db)
        if op in SEVERAL:
            shard = b"{sc:0}"
            after = {k: v for k, v in after.items() if k.startswith(shard)}
            before = {k: v for k, v in before.items() if k.startswith(shard)}
        assert after == before
        return
    after = dump(real_db)
    assert after[planted.encode()] == before[planted.encode()]


OOM: dict[str, tuple[bool, Callable[[WorkQueue, redis.Redis, dict[str, Item]], Any]]] = {
    "add_item": (True, OPERATIONS["add_item"]),
    "add_items": (
        True,
        lambda q, db, held: q.add_items(db, [Item(b"n", id=f"m{i}") for i in range(9)]),
    ),
    "lease": (False, OPERATIONS["lease"]),
    "complete": (False, OPERATIONS["complete"]),
}


@pytest.mark.parametrize("op", OOM)
def test_out_of_memory_refuses_cleanly(full_db: redis.Redis, op: str) -> None:
    queue, held = setup(full_db)
    limit(full_db)
    before = dump(full_db)
    refused, call = OOM[op]
    if refused:
        with pytest.raises(OutOfMemoryError):
            call(queue, full_db, held)
        assert dump(full_db) == before
        return
    try:
        call(queue, full_db, held)
    except OutOfMemoryError:
        assert dump(full_db) == before

"""A server out of memory (``maxmemory`` with ``noeviction``) refuses writes loudly and cleanly.

Redis refuses a script only at its first write, and every script checks before it writes, so a
refused operation reaches the caller as redis-py's ``OutOfMemoryError`` (not the library's
``ScriptError``) and the database is exactly as before. Operations whose first write frees memory
(leasing, completing, releasing) keep working, so a full queue can still be drained.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.exceptions import OutOfMemoryError

from checks import LEASE_SECS, OTHER, PREFIX, OomCheck, dump, limit, oom_test, setup_queue
from redis_work_queue import (
    Item,
    WorkQueue,
    complete_and_lease_from,
    lease_from,
)
from redis_work_queue.ops.spark import complete_held
from redis_work_queue.transport import run

pytestmark = pytest.mark.real_redis  # a server of the module's own

QUEUE = PREFIX
Op = Callable[[WorkQueue, redis.Redis, Item], Any]

#: Writes that must be refused: their first write needs memory.
REFUSED: list[tuple[str, Op]] = [
    ("add_item", lambda q, db, _: q.add_item(db, Item(b"new", id="new"))),
    ("add_unique_item", lambda q, db, _: q.add_unique_item(db, Item(b"new", id="new"))),
    ("add_item-delay", lambda q, db, _: q.add_item(db, Item(b"new", id="new"), delay=30)),
    ("add_item-ttl", lambda q, db, _: q.add_item(db, Item(b"new", id="new"), ttl=300)),
    ("add_items", lambda q, db, _: q.add_items(db, [Item(b"1", id="n1"), Item(b"2", id="n2")])),
    ("requeue_dead", lambda q, db, _: q.requeue_dead(db)),
]


def _held(q: WorkQueue, db: redis.Redis, held: Item) -> Any:
    # The Spark data source's completion of the items it still holds.
    assert held.lease_token is not None
    return run(db, complete_held(q.ops, [(held.id(), held.lease_token)]))


#: Writes that may go through (their first write frees memory) or be refused.
OTHERS: list[tuple[str, Op]] = [
    ("lease", lambda q, db, _: q.lease(db, LEASE_SECS, block=False)),
    ("lease_many", lambda q, db, _: q.lease_many(db, LEASE_SECS, 5, block=False)),
    ("renew", lambda q, db, held: q.renew(db, held, LEASE_SECS)),
    ("release", lambda q, db, held: q.release(db, held, reason="again")),
    ("release-delay", lambda q, db, held: q.release(db, held, delay=30)),
    ("complete", lambda q, db, held: q.complete(db, held)),
    ("complete_many", lambda q, db, held: q.complete_many(db, [held])),
    ("light_clean", lambda q, db, _: q.light_clean(db)),
    ("deep_clean", lambda q, db, _: q.deep_clean(db)),
    ("purge_dead", lambda q, db, _: q.purge_dead(db)),
    ("flush", lambda q, db, _: q.flush(db)),
    ("lease_from", lambda q, db, _: lease_from(db, [WorkQueue(OTHER), q], LEASE_SECS, block=False)),
    ("complete_and_lease_from", lambda q, db, held: complete_and_lease_from(db, q, held, [q], 30)),
    ("release_outcome", lambda q, db, held: q.release_outcome(db, held, reason="again")),
    ("renew_many", lambda q, db, held: q.renew_many(db, [held], LEASE_SECS)),
    ("give_back", lambda q, db, held: q.give_back(db, [held], "stopping")),
    ("complete_held", _held),
]

#: Both tables, as rows of the shared harness (tests/checks.py).
OOM_CHECKS = [
    *(OomCheck(name, operation, refused=True) for name, operation in REFUSED),
    *(OomCheck(name, operation) for name, operation in OTHERS),
]
#: Each row, on the sync and the asyncio API: refused writes change nothing; the others go
#: through or change nothing.
test_out_of_memory_refuses_cleanly = oom_test(OOM_CHECKS)


def test_a_blocking_lease_on_an_empty_queue_is_refused(
    full_db: redis.Redis, queue: WorkQueue
) -> None:
    """Nothing to lease: registering as a blocked worker needs memory, and is refused."""
    setup_queue(full_db, full_db, queued=False)
    limit(full_db)
    before = dump(full_db)
    with pytest.raises(OutOfMemoryError):
        queue.lease(full_db, LEASE_SECS, timeout=0.05)
    assert dump(full_db) == before


def test_a_full_queue_can_still_be_drained(full_db: redis.Redis, queue: WorkQueue) -> None:
    """Out of memory, adding is refused but leasing and completing go on."""
    setup_queue(full_db, full_db)
    limit(full_db)
    with pytest.raises(OutOfMemoryError):
        queue.add_item(full_db, Item(b"new", id="new"))
    leased = [item.id() for item in queue.lease_many(full_db, LEASE_SECS, 10, block=False)]
    assert sorted(leased) == ["a", "b"]
    for item_id in leased:
        assert queue.complete(full_db, Item(b"", id=item_id))

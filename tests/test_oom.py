"""A server out of memory (``maxmemory`` with ``noeviction``) refuses writes loudly and cleanly.

Redis refuses a script only at its first write, and every script checks before it writes, so a
refused operation reaches the caller as redis-py's ``OutOfMemoryError`` (not the library's
``ScriptError``) and the database is exactly as before. Operations whose first write frees memory
(leasing, completing, releasing) keep working, so a full queue can still be drained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import OutOfMemoryError

from redis_work_queue import Item, WorkQueue
from servers import Proc
from test_write_checks import LEASE_SECS, PREFIX, dump, setup_queue

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
]


@pytest.fixture
def full_db(module_redis: Proc) -> Iterator[redis.Redis]:
    """An emptied client of this module's own server (whose memory limit the tests lower and
    raise); ``limit`` below makes it run out of memory."""
    db = module_redis.client(socket_timeout=10)
    db.config_set("maxmemory", 0)
    db.config_set("maxmemory-policy", "noeviction")
    db.flushdb()
    try:
        yield db
    finally:
        db.config_set("maxmemory", 0)


def limit(db: redis.Redis) -> None:
    """Leave the server out of memory: every write that needs memory is refused."""
    db.config_set("maxmemory", 1)
    with pytest.raises(OutOfMemoryError):
        db.set("probe", b"x")


@pytest.mark.parametrize(("name", "operation"), REFUSED, ids=[name for name, _ in REFUSED])
def test_a_refused_write_is_out_of_memory_and_changes_nothing(
    full_db: redis.Redis, queue: WorkQueue, name: str, operation: Op
) -> None:
    state = setup_queue(full_db, full_db)
    limit(full_db)
    before = dump(full_db)
    with pytest.raises(OutOfMemoryError) as caught:
        operation(queue, full_db, state.held)
    assert "maxmemory" in str(caught.value)
    assert dump(full_db) == before


@pytest.mark.parametrize(("name", "operation"), OTHERS, ids=[name for name, _ in OTHERS])
def test_other_writes_go_through_or_change_nothing(
    full_db: redis.Redis, queue: WorkQueue, name: str, operation: Op
) -> None:
    state = setup_queue(full_db, full_db)
    limit(full_db)
    before = dump(full_db)
    try:
        operation(queue, full_db, state.held)
    except OutOfMemoryError:
        assert dump(full_db) == before


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

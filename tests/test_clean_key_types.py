"""A clean that meets a queue key of the wrong Redis type raises before it writes anything."""

from __future__ import annotations

import pytest
import redis

from helpers import dump_state
from redis_work_queue import Item, KeyPrefix, WorkQueue, WrongKeyTypeError

QUEUE = KeyPrefix("kt")
QUEUE_OPTIONS = {"max_deliveries": 3}
#: Every queue-level key a clean may write (the lists, hashes and sorted sets of the queue).
KEYS = ["queue", "processing", "wake", "deliveries", "reasons", "dead", "delayed", "waiting"]


def _work_for_every_step(db: redis.Redis, queue: WorkQueue) -> None:
    """A state in which both cleans have something to write with every key."""
    queue.add_items(db, [Item(b"", id=f"q{i}") for i in range(3)])
    for _ in range(2):
        assert queue.lease(db, 30, block=False) is not None
    db.delete("kt:lease:q0")  # expired: requeued
    db.set("kt:item:lost", b"")  # in neither list
    db.hset("kt:deliveries", "gone", 1)  # bookkeeping of an item that no longer exists
    db.hset("kt:reasons", "gone", "x")
    db.zadd("kt:delayed", {"late": 0})  # due, its delay lease lapsed
    db.set("kt:item:late", b"")
    db.zadd("kt:waiting", {"w": 2**50})  # a blocked worker: pushes wake it


@pytest.mark.parametrize("kind", ["light_clean", "deep_clean"])
@pytest.mark.parametrize("key", KEYS)
def test_wrong_type_fails_before_any_write(
    db: redis.Redis, queue: WorkQueue, kind: str, key: str
) -> None:
    _work_for_every_step(db, queue)
    db.delete(f"kt:{key}")
    db.set(f"kt:{key}", "not the right type")
    before = dump_state(db)
    with pytest.raises(WrongKeyTypeError):
        getattr(queue, kind)(db)
    assert dump_state(db) == before


@pytest.mark.parametrize("kind", ["light_clean", "deep_clean"])
def test_the_same_state_with_right_types_is_cleaned(
    db: redis.Redis, queue: WorkQueue, kind: str
) -> None:
    """Control: without the wrong type, the same state makes the clean write."""
    _work_for_every_step(db, queue)
    before = dump_state(db)
    report = getattr(queue, kind)(db)
    assert dump_state(db) != before
    assert report.requeued >= 1
    assert report.forgotten >= 1

"""Expiry (ttl): an item not completed within its time to live disappears and is never handed
out after it expired, wherever it was (queued behind others, leased, released, delayed); the ids
it leaves behind are dropped when met."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from helpers import get, keys_left, lrange, raw
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue
from redis_work_queue.ops import LEASE_BUDGET

QUEUE = KeyPrefix("ttl")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_expired_item_behind_others_is_skipped",
    "test_item_expires_and_its_id_is_dropped_when_met",
    "test_many_expired_ids_before_a_live_one",
    "test_peek_shows_expired_leftovers_without_data",
    "test_released_before_expiry_then_expired_in_the_queue",
    "test_ttl_has_millisecond_precision",
}
TTL = 0.1
PAST_TTL = TTL + 0.04


def test_item_expires_and_its_id_is_dropped_when_met(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    assert queue.add_item(db, Item(b"short", id="t"), ttl=TTL)
    assert 0 < db.pttl("ttl:item:t") <= TTL * 1000
    assert queue.add_item(db, Item(b"again", id="t"), ttl=TTL) is False  # still exists
    time.sleep(PAST_TTL)
    assert get(db, "ttl:item:t") is None
    assert queue.queue_len(db) == 1  # the id is left behind ...
    assert queue.lease(db, 30, block=False) is None
    assert queue.queue_len(db) == 0  # ... and dropped by the first lease that meets it
    assert keys_left(db) == []
    # the id is free again
    assert queue.add_item(db, Item(b"new", id="t"))


def test_expired_item_behind_others_is_skipped(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"", id="a"))
    queue.add_item(db, Item(b"", id="b"), ttl=60)
    queue.add_item(db, Item(b"", id="c"), ttl=TTL)
    queue.add_items(db, [Item(b"", id="d"), Item(b"", id="e")], ttl=TTL)
    queue.add_unique_item(db, Item(b"", id="f"), ttl=TTL)
    queue.add_item(db, Item(b"", id="g"))
    assert queue.stats(db).queued == 7
    time.sleep(PAST_TTL)
    got = queue.lease_many(db, 30, 10, block=False)
    assert [i.id() for i in got] == ["a", "b", "g"]
    assert queue.queue_len(db) == 0
    assert queue.stats(db).queued == 0
    assert queue.lease(db, 30, block=False) is None


def test_peek_shows_expired_leftovers_without_data(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"x", id="gone"), ttl=TTL)
    queue.add_item(db, Item(b"y", id="live"))
    time.sleep(PAST_TTL)
    assert [(p.id, p.data) for p in queue.peek(db)] == [("gone", None), ("live", b"y")]
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert item.id() == "live"
    assert queue.peek(db) == []


def test_expired_while_leased_then_released(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"x", id="t"), ttl=TTL)
    item = queue.lease(db, 30, block=False)
    assert item is not None
    time.sleep(PAST_TTL)
    # the item no longer exists: nothing goes back to the queue
    assert queue.release(db, item, reason="too late") is False
    assert queue.lease(db, 30, block=False) is None
    assert queue.stats(db) == queue.stats(db).__class__(0, 0, 0, 0, 0)
    assert keys_left(db) == []


def test_expired_while_leased_then_released_with_a_delay(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"x", id="t"), ttl=TTL)
    item = queue.lease(db, 30, block=False)
    assert item is not None
    time.sleep(PAST_TTL)
    assert queue.release(db, item, delay=0.05) is False
    time.sleep(0.06)
    assert queue.lease(db, 30, block=False) is None
    assert keys_left(db) == []


def test_released_before_expiry_then_expired_in_the_queue(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"x", id="t"), ttl=1.0)  # long enough for a busy machine
    time.sleep(0.05)  # so that a renewal by the lease or the release would show
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert queue.release(db, item, reason="retry")
    # the time to live counts from the add: leasing and releasing do not renew it
    assert 0 < db.pttl("ttl:item:t") <= 950
    time.sleep(1.05)
    assert queue.lease(db, 30, block=False) is None
    # its delivery count and reason go with it
    assert keys_left(db) == []


def test_released_with_delay_before_expiry_then_expired(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"x", id="t"), ttl=TTL)
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert queue.release(db, item, delay=0.25, reason="later")
    time.sleep(0.3)
    assert queue.lease(db, 30, block=False) is None
    queue.light_clean(db)
    assert queue.lease(db, 30, block=False) is None
    assert queue.stats(db).delayed == 0


def test_expired_while_its_lease_also_expired(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"x", id="t"), ttl=TTL)
    item = queue.lease(db, 0.05, block=False)
    assert item is not None
    time.sleep(PAST_TTL)
    report = queue.light_clean(db)
    assert (report.requeued, report.dropped) == (0, 1)
    assert queue.deep_clean(db).requeued == 0
    assert queue.lease(db, 30, block=False) is None
    assert queue.complete(db, item) is False
    assert queue.complete_many(db, [item]) == []
    assert keys_left(db) == []


def test_complete_after_expiry_reports_nothing_completed(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_items(db, [Item(b"", id="a"), Item(b"", id="b")], ttl=TTL)
    queue.add_item(db, Item(b"", id="c"))
    held = queue.lease_many(db, 30, 3, block=False)
    assert len(held) == 3
    time.sleep(PAST_TTL)
    assert [i.id() for i in queue.complete_many(db, held)] == ["c"]
    assert keys_left(db) == []


def test_many_expired_ids_before_a_live_one(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    n = 2 * LEASE_BUDGET + 50
    queue.add_items(db, [Item(b"", id=f"e{i}") for i in range(n)], ttl=TTL)
    queue.add_item(db, Item(b"live", id="live"))
    time.sleep(PAST_TTL)
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert item.id() == "live"
    assert queue.queue_len(db) == 0


def test_blocking_lease_skips_expired_ids(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_items(db, [Item(b"", id="e1"), Item(b"", id="e2")], ttl=TTL)
    time.sleep(PAST_TTL)
    started = time.monotonic()
    assert queue.lease(db, 30, timeout=0.2) is None
    assert time.monotonic() - started >= 0.15
    assert queue.queue_len(db) == 0
    assert queue.processing(db) == 0
    assert keys_left(db) == []


def test_expired_items_are_not_recovered_by_cleaners(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"", id="t"), ttl=TTL)
    item = queue.lease(db, 30, block=False)
    assert item is not None
    db.delete(queue.keys.lease("t"))  # the worker died too
    time.sleep(PAST_TTL)
    queue.light_clean(db)
    queue.deep_clean(db)
    assert lrange(db, queue.keys.queue) == []
    assert queue.lease(db, 30, block=False) is None


@pytest.mark.parametrize("bad", [0, -1, 0.0001, float("nan"), float("inf"), True, "5", 10**10])
def test_bad_ttls_are_refused(bytes_db: redis.Redis, queue: WorkQueue, bad: Any) -> None:
    db = bytes_db
    with pytest.raises(InvalidArgumentError):
        queue.add_item(db, Item(b"", id="a"), ttl=bad)
    with pytest.raises(InvalidArgumentError):
        queue.add_unique_item(db, Item(b"", id="a"), ttl=bad)
    assert keys_left(db) == []


def test_ttl_has_millisecond_precision(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"", id="a"), ttl=1.234)
    assert 1200 < int(raw(db, "PTTL", "ttl:item:a")) <= 1234
    queue.add_unique_item(db, Item(b"", id="b"), ttl=3600.5)
    assert 3600000 < int(raw(db, "PTTL", "ttl:item:b")) <= 3600500

"""The ``with queue.leased(db, lease_secs) as item:`` context manager."""

from __future__ import annotations

import time

import pytest
import redis

from helpers import keys_of
from lifecycle_helpers import (
    assert_no_bookkeeping,
    deliveries_of,
    keys_under,
    reason_of,
)
from redis_work_queue import Item, KeyPrefix, WorkQueue

P = "ctx"
QUEUE = KeyPrefix(P)
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_base_exceptions_release_too",
    "test_body_that_lost_its_lease_cannot_release_the_new_holders",
    "test_exception_releases_records_reason_and_reraises",
    "test_nested_blocks_handle_their_own_items",
}


class Boom(Exception):
    pass


def test_normal_exit_completes(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    with queue.leased(db, 30, block=False) as item:
        assert item is not None
        assert (item.id(), item.data(), item.deliveries) == ("a", b"d", 1)
        assert item.lease_token is not None
        assert db.exists(keys_of(queue, "a").lease("a"))
        assert queue.processing(db) == 1
    assert_no_bookkeeping(db, P, "a")
    assert keys_under(db, f"{P}:") == set()
    assert queue.lease(db, 30, block=False) is None


def test_exception_releases_records_reason_and_reraises(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    with pytest.raises(Boom, match="bad input"), queue.leased(db, 30, block=False) as item:
        assert item is not None
        raise Boom("bad input")
    assert not db.exists(keys_of(queue, "a").lease("a"))
    assert queue.processing(db) == 0
    assert queue.queue_len(db) == 1
    reason = reason_of(db, P, "a")
    assert reason is not None
    assert "Boom" in reason
    assert "bad input" in reason
    assert deliveries_of(db, P, "a") == 1
    again = queue.lease(db, 30, block=False)
    assert again is not None
    assert (again.id(), again.deliveries) == ("a", 2)


def test_base_exceptions_release_too(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    with pytest.raises(KeyboardInterrupt), queue.leased(db, 30, block=False):
        raise KeyboardInterrupt
    assert queue.queue_len(db) == 1
    assert queue.processing(db) == 0
    assert "KeyboardInterrupt" in (reason_of(db, P, "a") or "")


def test_retry_delay_holds_the_item_back(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"d", id="a"))
    with pytest.raises(Boom), queue.leased(db, 30, block=False, retry_delay=0.3):
        raise Boom("later")
    failed = time.monotonic()
    assert queue.lease(db, 30, block=False) is None
    time.sleep(max(0.0, 0.32 - (time.monotonic() - failed)))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert item.deliveries == 2


def test_nothing_to_lease_yields_none(db: redis.Redis, queue: WorkQueue) -> None:
    with queue.leased(db, 30, block=False) as item:
        assert item is None
    assert keys_under(db, f"{P}:") == set()


def test_blocking_with_timeout_yields_none(real_db: redis.Redis, queue: WorkQueue) -> None:
    started = time.monotonic()
    with queue.leased(real_db, 30, timeout=0.2) as item:
        assert item is None
    assert 0.15 <= time.monotonic() - started < 2


def test_exception_on_the_last_delivery_dead_letters_with_reason(db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P), max_deliveries=2)
    queue.add_item(db, Item(b"d", id="a"))
    for attempt in (1, 2):
        with pytest.raises(Boom), queue.leased(db, 30, block=False) as item:
            assert item is not None
            assert item.deliveries == attempt
            raise Boom(f"attempt {attempt}")
    assert queue.lease(db, 30, block=False) is None
    [dead] = queue.dead_letters(db)
    assert dead.id == "a"
    assert dead.deliveries == 2
    assert "attempt 2" in dead.reason
    assert "Boom" in dead.reason


def test_body_that_lost_its_lease_cannot_release_the_new_holders(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"d", id="a"))
    with pytest.raises(Boom), queue.leased(db, 0.05, block=False) as item:
        assert item is not None
        time.sleep(0.12)
        assert queue.light_clean(db).requeued == 1
        other = queue.lease(db, 30, block=False)
        assert other is not None
        raise Boom("too slow")
    # The failed body's release was refused: the new holder keeps its lease and no reason of
    # the stale worker was recorded.
    assert db.get(keys_of(queue, "a").lease("a")) == other.lease_token.encode()
    assert queue.processing(db) == 1
    assert queue.queue_len(db) == 0
    assert reason_of(db, P, "a") == "lease expired"
    assert queue.renew(db, other, 30)
    assert queue.complete(db, other)
    assert keys_under(db, f"{P}:") == set()


def test_nested_blocks_handle_their_own_items(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"1", id="one"))
    queue.add_item(db, Item(b"2", id="two"))
    with queue.leased(db, 30, block=False) as outer:
        assert outer is not None
        with pytest.raises(Boom), queue.leased(db, 30, block=False) as inner:
            assert inner is not None
            assert inner.id() == "two"
            raise Boom("inner")
        assert db.exists(keys_of(queue, "one").lease("one"))
    assert not db.exists(keys_of(queue, "one").item("one"))
    assert queue.queue_len(db) == 1
    left = queue.lease(db, 30, block=False)
    assert left is not None
    assert (left.id(), left.deliveries) == ("two", 2)

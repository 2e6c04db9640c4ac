"""The per-queue counters (``<prefix>:counts``): each path of an item adds to its counter in the
same script call as the change it counts, on every backend and both APIs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from helpers import raw
from redis_work_queue import Item, KeyPrefix, WorkQueue, scripts
from redis_work_queue.keyprefix import QueueKeys
from redis_work_queue.ops.sharded import shard_prefix

QUEUE = KeyPrefix("tally")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_deep_clean_counts_recovered_items",
    "test_held_complete_counts_completions",
    "test_lease_that_buries_counts_a_dead_letter",
    "test_pipelined_add_counts",
}
KEYS = QueueKeys(QUEUE)
#: The keys of the unsharded queue and of each of its 4 shards (a sharded run's count).
SHARD_KEYS = [KEYS, *(QueueKeys(KeyPrefix(shard_prefix(QUEUE.prefix, i, 4))) for i in range(4))]
NAMES = ("added", "completed", "failed", "retried", "dead", "expired", "requeued")


@pytest.fixture
def make(queue_kind: Callable[..., WorkQueue], queue_shards: int) -> Callable[..., WorkQueue]:
    def build(**options: object) -> WorkQueue:
        if queue_shards > 1:
            options["shards"] = queue_shards
        return queue_kind(QUEUE, **options)

    return build


def counts(db: redis.Redis) -> dict[str, int]:
    """The counters, read with HGETALL (each shard's, summed); a counter never written reads 0."""
    total = dict.fromkeys(NAMES, 0)
    for keys in SHARD_KEYS:
        flat = raw(db, "HGETALL", keys.counts)
        pairs = flat.items() if isinstance(flat, dict) else zip(flat[0::2], flat[1::2], strict=True)
        found = {bytes(k).decode(): int(v) for k, v in pairs}
        assert set(found) <= set(NAMES), found
        for name, value in found.items():
            total[name] += value
    return total


def counters_exist(db: redis.Redis) -> bool:
    """Whether the queue, or any of its shards, has a counters key."""
    return any(db.exists(keys.counts) for keys in SHARD_KEYS)


def only(**expected: int) -> dict[str, int]:
    return {name: expected.get(name, 0) for name in NAMES}


def expire(db: redis.Redis, item: Item) -> None:
    """The item's lease runs out (on whichever shard holds it)."""
    for keys in SHARD_KEYS:
        db.delete(keys.lease(item.id()))


def test_nothing_counted_before_anything_happens(db: redis.Redis, make: Callable[..., WorkQueue]):
    queue = make()
    assert queue.lease(db, 30, block=False) is None
    assert queue.complete(db, Item(b"", id="none")) is False
    queue.light_clean(db)
    assert counts(db) == only()
    assert not counters_exist(db)


def test_add_counts_items_written(db: redis.Redis, make: Callable[..., WorkQueue]) -> None:
    queue = make()
    assert queue.add_item(db, Item(b"a", id="a"))
    assert not queue.add_item(db, Item(b"again", id="a"))  # exists: nothing written
    assert counts(db) == only(added=1)
    assert queue.add_items(db, [Item(b"", id=i) for i in ("a", "b", "c")]) == [False, True, True]
    assert counts(db) == only(added=3)
    assert queue.add_item(db, Item(b"later", id="d"), delay=60)
    queue.add_unique_item(db, Item(b"u", id="u"))
    assert counts(db) == only(added=5)


def test_pipelined_add_counts(db: redis.Redis, make: Callable[..., WorkQueue]) -> None:
    queue = make()
    with db.pipeline(transaction=False) as pipe:
        WorkQueue(QUEUE).add_unique_item_to_pipeline(pipe, Item(b"p", id="p"))
        pipe.execute()
    assert queue.queue_len(db) == 1
    assert counts(db) == only(added=1)


def test_complete_counts_once(db: redis.Redis, make: Callable[..., WorkQueue]) -> None:
    queue = make()
    queue.add_items(db, [Item(b"", id=i) for i in ("a", "b", "c", "queued")])
    leased = queue.lease_many(db, 30, 3, block=False)
    assert len(leased) == 3
    assert queue.complete(db, leased[0]) is True
    assert queue.complete(db, leased[0]) is False
    assert counts(db) == only(added=4, completed=1)
    assert len(queue.complete_many(db, [*leased, Item(b"", id="never")])) == 2
    (queued,) = {"a", "b", "c", "queued"} - {item.id() for item in leased}  # "queued" in FIFO
    assert queue.complete(db, Item(b"", id=queued)) is True  # completed while queued
    assert counts(db) == only(added=4, completed=4)


def test_release_counts_a_failure_and_a_retry(
    db: redis.Redis, make: Callable[..., WorkQueue]
) -> None:
    queue = make()
    queue.add_item(db, Item(b"", id="r"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert queue.release(db, item, reason="flaky")
    assert counts(db) == only(added=1, failed=1, retried=1)
    assert queue.release(db, item) is False  # not held any more: nothing counted
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert queue.release(db, item, delay=60)  # to the delayed set
    assert counts(db) == only(added=1, failed=2, retried=2)


def test_give_back_is_a_retry_without_a_failure(
    db: redis.Redis, make: Callable[..., WorkQueue]
) -> None:
    queue = make(max_deliveries=1)
    queue.add_item(db, Item(b"", id="g"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert queue.give_back(db, [item]) == [True]
    assert counts(db) == only(added=1, retried=1)


def test_release_of_the_last_delivery_counts_a_failure_and_a_dead_letter(
    db: redis.Redis, make: Callable[..., WorkQueue]
) -> None:
    queue = make(max_deliveries=2)
    queue.add_item(db, Item(b"", id="d"))
    for _ in range(2):
        item = queue.lease(db, 30, block=False)
        assert item is not None
        assert queue.release(db, item, reason="bad")
    assert queue.dead_count(db) == 1
    assert counts(db) == only(added=1, failed=2, retried=1, dead=1)
    assert queue.requeue_dead(db) == 1
    assert queue.requeue_dead(db) == 0
    assert counts(db) == only(added=1, failed=2, retried=1, dead=1, requeued=1)


def test_light_clean_counts_expired_leases(db: redis.Redis, make: Callable[..., WorkQueue]):
    queue = make(max_deliveries=2)
    queue.add_items(db, [Item(b"", id=i) for i in ("x", "y", "live")])
    leased = {item.id(): item for item in queue.lease_many(db, 30, 3, block=False)}
    expire(db, leased["x"])
    expire(db, leased["y"])
    report = queue.light_clean(db)
    assert report.requeued == 2
    assert counts(db) == only(added=3, expired=2, retried=2)
    # Their second delivery runs out too: the last allowed one, so they are buried.
    again = queue.lease_many(db, 30, 2, block=False)
    assert {item.id() for item in again} == {"x", "y"}
    for item in again:
        expire(db, item)
    queue.light_clean(db)
    assert queue.dead_count(db) == 2
    assert counts(db) == only(added=3, expired=4, retried=2, dead=2)


def test_lease_that_buries_counts_a_dead_letter(
    db: redis.Redis, make: Callable[..., WorkQueue]
) -> None:
    """An item a cleaner of another implementation requeued after its last delivery is buried
    by the lease that meets it."""
    queue = make(max_deliveries=1)
    queue.add_item(db, Item(b"", id="z"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    expire(db, item)
    db.lrem(KEYS.processing, 1, "z")
    db.lpush(KEYS.queue, "z")
    assert queue.lease(db, 30, block=False) is None
    assert queue.dead_count(db) == 1
    assert counts(db) == only(added=1, dead=1)


def test_deep_clean_counts_recovered_items(db: redis.Redis, make: Callable[..., WorkQueue]):
    queue = make()
    queue.add_items(db, [Item(b"", id=i) for i in ("lost", "fine")])
    db.lrem(KEYS.queue, 1, "lost")  # in neither list, without a lease
    report = queue.deep_clean(db)
    assert report.requeued == 1
    assert counts(db) == only(added=2, expired=1, retried=1)


def test_held_complete_counts_completions(db: redis.Redis, make: Callable[..., WorkQueue]):
    """The held completion (the Spark data source's commit) counts what it completed."""
    queue = make()
    queue.add_items(db, [Item(b"", id=i) for i in ("h1", "h2")])
    leased = queue.lease_many(db, 30, 2, block=False)
    pairs: list[scripts.Arg] = []
    for item in leased:
        assert item.lease_token is not None
        pairs += (item.id(), item.lease_token)
    pairs += ("h1", "not-the-lease")
    held = scripts.load("complete_held")
    assert [int(f) for f in held(db, KEYS.script_keys, (*KEYS.script_args, *pairs))] == [1, 1, 0]
    assert counts(db) == only(added=2, completed=2)


def test_flush_removes_the_counters(db: redis.Redis, make: Callable[..., WorkQueue]) -> None:
    queue = make()
    queue.add_item(db, Item(b"", id="f"))
    assert counters_exist(db)
    queue.flush(db)
    assert not counters_exist(db)
